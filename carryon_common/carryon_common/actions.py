"""An action client that can be made while an executor spins its node.

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
from typing import Any

from rclpy.action import ActionClient as _RclpyActionClient


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
