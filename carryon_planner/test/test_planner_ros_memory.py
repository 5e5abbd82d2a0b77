"""The planner's memory client keeps the other users' ids and values per user and sends their
token, so memory_node leaves them out while they hold (GetContext.others_token); a reply that
leaves out values this planner does not hold fails the request rather than run the
cross-user checks on nothing."""

from __future__ import annotations

from typing import Any

import pytest

from carryon_interfaces.srv import GetContext
from carryon_planner.core.memory_ops import ContextUnavailable
from carryon_planner.ros_memory import RosMemory


class FakeNode:
    """Answers get_context like memory_node: the lists only when the request's token is stale."""

    def __init__(self, token: int = 7) -> None:
        self.token, self.requests = token, []

    def call_service(self, _srv: Any, _name: str, request: Any, _timeout_s: float) -> Any:
        self.requests.append(request.others_token)
        answer = GetContext.Response(status=GetContext.Response.STATUS_OK, others_token=self.token)
        answer.others_unchanged = request.others_token == self.token
        if not answer.others_unchanged:
            answer.other_users, answer.foreign_values = ["bob"], ["peanuts"]
        return answer


def test_the_other_users_values_are_kept_per_user_and_refreshed_when_their_token_changes() -> None:
    node = FakeNode()
    memory = RosMemory(node, 1.0)  # type: ignore[arg-type]
    for _ in range(3):
        context = memory.context("dave")
        assert context.other_users == ("bob",) and context.foreign_values == ("peanuts",)
    assert node.requests == [0, 7, 7]
    assert memory.context("erin").foreign_values == ("peanuts",) and node.requests[-1] == 0  # kept per user
    node.token = 8  # a user file changed
    assert memory.context("dave").foreign_values == ("peanuts",) and node.requests[-1] == 7


def test_a_reply_that_leaves_out_values_the_planner_lacks_fails_the_request() -> None:
    node = FakeNode()
    memory = RosMemory(node, 1.0)  # type: ignore[arg-type]
    memory._others["dave"] = (7, ("bob",), ("peanuts",))
    node.token = 9
    lying = GetContext.Response(status=GetContext.Response.STATUS_OK, others_token=9, others_unchanged=True)
    node.call_service = lambda *_args: lying  # type: ignore[method-assign]
    with pytest.raises(ContextUnavailable, match="left out"):
        memory.context("dave")
