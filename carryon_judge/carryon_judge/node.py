"""judge_node: decides running / success / failed for the active subtask.

Scaffolding: the judge backends arrive with issue #7. Judge requests are answered with
STATUS_NOT_IMPLEMENTED; no verdicts are published.
"""

from __future__ import annotations

from typing import Any

from carryon_common.core import names
from carryon_common.core.status import planned
from carryon_common.node import CarryOnNode, run_node
from carryon_interfaces.msg import Verdict
from carryon_interfaces.srv import Judge
from carryon_judge.core.config import JudgeConfig

CAPABILITIES = (
    planned("judge.judge", 7, "verdict on a subtask against its baseline observation"),
    planned("judge.backend", 7, "backends vlm, geometric, sim_state"),
    planned("judge.observe", 7, "newly revealed contents for observe subtasks"),
)


class JudgeNode(CarryOnNode):
    def __init__(self, **node_kwargs: Any) -> None:
        super().__init__(names.JUDGE_NODE, JudgeConfig, capabilities=CAPABILITIES, **node_kwargs)
        self.set_backends({"judge": self.config.backend})
        self.verdict_pub = self.create_publisher(Verdict, names.VERDICT, 10)
        self.serve_not_implemented(Judge, names.JUDGE, "judge.judge")
        self.set_ready()


def main() -> int:
    return run_node(JudgeNode)
