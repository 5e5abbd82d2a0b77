"""The one place where judge core types meet ROS messages."""

from __future__ import annotations

from builtin_interfaces.msg import Time as TimeMsg

from carryon_interfaces.msg import Verdict
from carryon_judge.core.types import JudgeVerdict, VerdictStatus


def verdict_to_msg(verdict: JudgeVerdict, stamp: TimeMsg) -> Verdict:
    msg = Verdict()
    msg.header.stamp = stamp
    msg.subtask_id = verdict.subtask_id
    msg.status = int(verdict.status)
    msg.reason = verdict.reason
    msg.revealed_contents = list(verdict.revealed_contents)
    msg.scene_update_required = verdict.scene_update_required
    msg.confidence = float(verdict.confidence)
    msg.backend = verdict.backend
    msg.observation_id = verdict.observation_id
    return msg


def verdict_from_msg(msg: Verdict) -> JudgeVerdict:
    """Raises ValueError for an unknown status."""
    return JudgeVerdict(
        subtask_id=msg.subtask_id,
        status=VerdictStatus(msg.status),
        reason=msg.reason,
        backend=msg.backend,
        revealed_contents=tuple(msg.revealed_contents),
        scene_update_required=msg.scene_update_required,
        confidence=msg.confidence,
        observation_id=msg.observation_id,
    )
