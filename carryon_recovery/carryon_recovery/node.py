"""recovery_node: runs recovery skills after a failed verdict.

Scaffolding: the base skill (carryon_recovery.core.base_skill, run in the in-process
simulator), the versioned library and reflection (`carryon reflect`) exist; this node does
not run them yet (issue #9). Recover goals are accepted and aborted with
OUTCOME_NOT_IMPLEMENTED; nothing is published on the recovery chunk topic.
"""

from __future__ import annotations

from typing import Any

from carryon_common.core import names
from carryon_common.core.status import planned
from carryon_common.node import CarryOnNode, run_node
from carryon_interfaces.action import Recover
from carryon_interfaces.msg import ActionChunk
from carryon_recovery import convert
from carryon_recovery.core.config import RecoveryConfig
from carryon_recovery.core.types import Outcome, RecoveryResult

CAPABILITIES = (
    planned("recovery.recover", 9, "base re-grasp skill: localise, grasp, check holding, transport, resume"),
    planned("recovery.motion", 9, "motion backends builtin (IK, shielded) and moveit_py"),
    planned("recovery.library", 9, "versioned skills/recovery/<skill>/vN.yaml with lineage"),
    planned("recovery.reflection", 9, "offline reflection producing new skill versions"),
)


class RecoveryNode(CarryOnNode):
    def __init__(self, **node_kwargs: Any) -> None:
        super().__init__(names.RECOVERY_NODE, RecoveryConfig, capabilities=CAPABILITIES, **node_kwargs)
        self.set_backends({"motion": self.config.motion_backend})
        self.chunk_pub = self.create_publisher(ActionChunk, names.RECOVERY_CHUNK, 10)
        default_skill = self.config.default_skill

        def not_implemented(result: Recover.Result, message: str) -> None:
            convert.result_to_msg(RecoveryResult(Outcome.NOT_IMPLEMENTED, message, 0, default_skill, 0), result)

        self._recover = self.action_not_implemented(Recover, names.RECOVER, "recovery.recover", not_implemented)
        self.set_ready()


def main() -> int:
    return run_node(RecoveryNode)
