"""Action clients of CarryOn's nodes: one that can be made while an executor spins its node,
and one goal in flight waited on from a worker thread (`GoalRun`, CarryOnNode.start_goal).

rclpy's `ActionClient.__init__` adds the client to the node's waitables before it makes
the lock that guards it (ros2/rclpy#1589, rclpy 9.1.2 here). When another thread spins
the node, the executor can ask the half-made client for its entities in between, get an
`AttributeError` and stop spinning: every later callback of every node on that executor
is silently lost (a goal is never answered). Nodes make clients lazily from callbacks of a
multi-threaded executor, and the CLI and tests make them on spinning nodes, so every
CarryOn action client is this one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from rclpy.action import ActionClient as _RclpyActionClient

from carryon_common.core.errors import CarryOnError


class ActionClient(_RclpyActionClient):  # type: ignore[misc]
    """rclpy's ActionClient with its lock made before it becomes visible to an executor."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        object.__setattr__(self, "_lock", threading.Lock())
        super().__init__(*args, **kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        # The base class makes its lock again at the end of __init__; an executor may hold
        # the first one by then, so the first one stays.
        if name == "_lock" and "_lock" in self.__dict__:
            return
        super().__setattr__(name, value)


class ServiceUnavailable(CarryOnError):
    """A service another node should offer did not appear or did not answer in time."""


class GoalRun:
    """One action goal in flight, waited on from a worker thread (see `start_goal`)."""

    def __init__(
        self, client: Any, name: str, goal: Any, timeout_s: float, feedback: Callable[[Any], None] | None
    ) -> None:
        self.name = name
        if not client.wait_for_server(timeout_sec=timeout_s):
            raise ServiceUnavailable(f"action server {name} is not available after {timeout_s:.1f} s")
        accepted = threading.Event()
        send = client.send_goal_async(goal, feedback_callback=(lambda m: feedback(m.feedback)) if feedback else None)
        send.add_done_callback(lambda _f: accepted.set())
        if not accepted.wait(timeout_s):
            raise ServiceUnavailable(f"action server {name} did not answer the goal within {timeout_s:.1f} s")
        self.handle = send.result()
        if not self.handle.accepted:
            raise ServiceUnavailable(f"action server {name} rejected the goal")
        self._done = threading.Event()
        self._result = self.handle.get_result_async()
        self._result.add_done_callback(lambda _f: self._done.set())

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout_s: float) -> tuple[int, Any] | None:
        """(GoalStatus code, result) once the goal has ended; None on timeout."""
        if not self._done.wait(timeout_s):
            return None
        wrapped = self._result.result()
        return int(wrapped.status), wrapped.result

    def cancel(self, timeout_s: float) -> tuple[int, Any] | None:
        """Ask the server to cancel, then wait for the goal's result (None: it did not end in time)."""
        if not self.done():
            self.handle.cancel_goal_async()
        return self.wait(timeout_s)
