"""policy_node: runs the frozen VLA on one instruction at a time and publishes chunks.

Scaffolding: observations, backends and chunk publishing arrive with issue #4. RunPolicy
goals are accepted and aborted with STATUS_NOT_IMPLEMENTED. Nothing is published on the
chunk topic, so nothing can move the arm.
"""

from __future__ import annotations

from typing import Any

from carryon_common.core import names
from carryon_common.core.status import planned
from carryon_common.node import CarryOnNode, run_node
from carryon_interfaces.action import RunPolicy
from carryon_interfaces.msg import ActionChunk, InferenceTiming
from carryon_policy.core.config import PolicyConfig

CAPABILITIES = (
    planned("policy.run", 4, "RunPolicy action: observations -> backend -> chunks at the control rate"),
    planned("policy.backend", 4, "backends sim_scripted, sim_scripted_safe, openpi_remote, lerobot_local"),
)


def _run_not_implemented(result: RunPolicy.Result, message: str) -> None:
    result.status = RunPolicy.Result.STATUS_NOT_IMPLEMENTED
    result.message = message


class PolicyNode(CarryOnNode):
    def __init__(self, **node_kwargs: Any) -> None:
        super().__init__(names.POLICY_NODE, PolicyConfig, capabilities=CAPABILITIES, **node_kwargs)
        self.set_backends({"policy": self.config.backend})
        self.chunk_pub = self.create_publisher(ActionChunk, names.POLICY_CHUNK, 10)
        self.timing_pub = self.create_publisher(InferenceTiming, names.POLICY_TIMING, 10)
        self._run = self.action_not_implemented(RunPolicy, names.RUN_POLICY, "policy.run", _run_not_implemented)
        self.set_ready()


def main() -> int:
    return run_node(PolicyNode)
