"""Action clients made while a multi-threaded executor spins their node (ros2/rclpy#1589):
the executor keeps spinning and goals are still answered.

With rclpy's own ActionClient (CARRYON_RACE_STOCK=1) the executor here died on
`AttributeError: 'ActionClient' object has no attribute '_lock'`; a CI run lost a goal
that way (test_policy_node, stop 30)."""

from __future__ import annotations

import os
import threading
import time

import rclpy
import rclpy.action
from rclpy.action import ActionServer
from rclpy.context import Context
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node

from carryon_common.actions import ActionClient
from carryon_interfaces.action import RunPolicy

CLIENTS = 300


def _execute(goal_handle):  # type: ignore[no-untyped-def]
    goal_handle.succeed()
    return RunPolicy.Result(success=True, message="done")


def test_clients_made_while_the_executor_spins_do_not_stop_it() -> None:
    client_class = ActionClient
    if os.environ.get("CARRYON_RACE_STOCK") == "1":  # to see the race: the test then fails
        client_class = rclpy.action.ActionClient  # type: ignore[assignment]

    context = Context()  # the session's domain (conftest reserves one per test run)
    rclpy.init(context=context, args=[], domain_id=int(os.environ["ROS_DOMAIN_ID"]))
    executor = MultiThreadedExecutor(num_threads=4, context=context)
    errors: list[BaseException] = []

    def spin() -> None:
        try:
            executor.spin()
        except ExternalShutdownException:
            pass
        except Exception as exc:  # noqa: BLE001 - the failure under test: the spin loop dies
            errors.append(exc)

    nodes: list[Node] = []
    thread = threading.Thread(target=spin, name="race-spin", daemon=True)
    try:
        server_node = Node("server", context=context)
        ActionServer(server_node, RunPolicy, "run", _execute)
        node = Node("clients", context=context)
        node.create_timer(0.0005, lambda: None)  # keeps the executor rebuilding its wait set
        nodes += [server_node, node]
        executor.add_node(server_node)
        executor.add_node(node)
        thread.start()

        clients = [client_class(node, RunPolicy, "run") for _ in range(CLIENTS)]
        assert not errors, f"the executor stopped: {errors[0]!r}"
        assert thread.is_alive()

        client = clients[-1]
        assert client.wait_for_server(timeout_sec=10.0)
        future = client.send_goal_async(RunPolicy.Goal(instruction="wave", subtask_id="s1", step_budget=1))
        deadline = time.monotonic() + 10.0
        while not future.done() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert future.done(), f"goal not answered (executor errors: {errors!r})"
        assert future.result().accepted
    finally:
        # Everything this test started ends here: its spin thread (a 0.5 ms timer and 300
        # clients) left alive spun on into the next test, whose own session then hung in a
        # full run (carryon_common/test/test_calls_sendable.py, 10 min at 100 % CPU).
        executor.shutdown(timeout_sec=5.0)
        if thread.is_alive():
            thread.join(timeout=5.0)
        if thread.is_alive():  # still in its wait: the context's shutdown ends that wait
            rclpy.try_shutdown(context=context)
            thread.join(timeout=10.0)
        for made in nodes:
            made.destroy_node()
        rclpy.try_shutdown(context=context)
    assert not thread.is_alive(), "the executor's spin thread outlived the test"
