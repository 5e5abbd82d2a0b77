"""planner_node: turns operator/user requests into validated plans and runs them.

Scaffolding: planning, validation and the executive arrive with issue #8. Requests are
answered now with STATUS_NOT_IMPLEMENTED and a message saying so.
"""

from __future__ import annotations

from typing import Any

from carryon_common.core import names
from carryon_common.core.status import planned
from carryon_common.node import CarryOnNode, latched_qos, run_node
from carryon_interfaces.action import Assist
from carryon_interfaces.msg import PlanState
from carryon_interfaces.srv import Ask
from carryon_planner.core.config import PlannerConfig

CAPABILITIES = (
    planned("planner.ask", 8, "plan a request with the user's memory and validate it"),
    planned("planner.assist", 8, "plan, dispatch and supervise subtasks with feedback"),
    planned("planner.llm", 8, "LLM backends 'local' (offline) and 'openai'"),
    planned("planner.validator", 8, "named validation checks and the repair loop"),
)


def _assist_not_implemented(result: Assist.Result, message: str) -> None:
    result.status = Assist.Result.STATUS_NOT_IMPLEMENTED
    result.message = message


class PlannerNode(CarryOnNode):
    def __init__(self, **node_kwargs: Any) -> None:
        super().__init__(names.PLANNER_NODE, PlannerConfig, capabilities=CAPABILITIES, **node_kwargs)
        self.set_backends({"llm": self.config.llm_backend})
        self.plan_state_pub = self.create_publisher(PlanState, names.PLAN_STATE, latched_qos())
        self.serve_not_implemented(Ask, names.ASK, "planner.ask")
        self._assist = self.action_not_implemented(Assist, names.ASSIST, "planner.assist", _assist_not_implemented)
        self.set_ready()


def main() -> int:
    return run_node(PlannerNode)
