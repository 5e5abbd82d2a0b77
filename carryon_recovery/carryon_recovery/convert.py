"""The one place where recovery core types meet ROS messages."""

from __future__ import annotations

from carryon_interfaces.action import Recover
from carryon_recovery.core.types import RecoveryResult


def result_to_msg(result: RecoveryResult, msg: Recover.Result) -> Recover.Result:
    """Fill a Recover result message in place and return it."""
    msg.outcome = int(result.outcome)
    msg.message = result.message
    msg.steps = result.steps
    msg.skill = result.skill
    msg.version = result.version
    return msg
