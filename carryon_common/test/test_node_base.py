"""CarryOnNode in-process: parameters from the config class, status service, scaffolding."""

from __future__ import annotations

import os

import pytest
from pydantic import Field
from rclpy.parameter import Parameter

from carryon_common.calls import RosSession
from carryon_common.convert import msg_to_health
from carryon_common.core.config import NodeConfig
from carryon_common.core.errors import ConfigError
from carryon_common.core.status import NodeState, implemented, planned
from carryon_common.node import CarryOnNode
from carryon_interfaces.srv import GetContext, GetStatus


class ToyConfig(NodeConfig):
    rate_hz: float = Field(20.0, gt=0.0, description="Rate, Hz.")
    labels: tuple[str, ...] = Field((), description="Labels.")


CAPS = (implemented("toy.ping", "answers"), planned("toy.context", 99, "context service"))


def make_node(ros, overrides=()):  # type: ignore[no-untyped-def]
    node = CarryOnNode(
        "toy_node",
        ToyConfig,
        capabilities=CAPS,
        namespace="carryon",
        context=ros.context,
        parameter_overrides=list(overrides),
    )
    return ros.add(node)


def test_parameters_are_declared_from_config_with_descriptions(ros) -> None:  # type: ignore[no-untyped-def]
    node = make_node(ros, [Parameter("rate_hz", value=5), Parameter("labels", value=["a"])])
    assert node.config == ToyConfig(rate_hz=5.0, labels=("a",))
    descriptor = node.describe_parameter("rate_hz")
    assert "Rate, Hz." in descriptor.description
    assert descriptor.read_only


def test_invalid_and_unknown_parameters_are_config_errors(ros) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="rate_hz: Input should be greater than 0"):
        make_node(ros, [Parameter("rate_hz", value=-1.0)])
    with pytest.raises(ConfigError, match="rate_hx: unknown parameter"):
        make_node(ros, [Parameter("rate_hx", value=1.0)])


def test_status_service_reports_state_and_missing_capabilities(ros, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CARRYON_PROFILE", "robot")  # what the launchers set for each node
    node = make_node(ros)
    node.set_backends({"policy": "toy"})
    with RosSession("test_client") as session:
        starting = msg_to_health(
            session.call(GetStatus, "/carryon/toy_node/get_status", GetStatus.Request(), 10.0).status
        )
        assert starting.state == NodeState.STARTING and not starting.ready
        node.set_ready()
        health = msg_to_health(session.call(GetStatus, "/carryon/toy_node/get_status", GetStatus.Request(), 5.0).status)
    assert health.ready
    assert health.node_name == "/carryon/toy_node"
    assert health.backends == ("security=optional, every key given", "policy=toy")
    assert health.profile == "robot"
    assert [c.name for c in health.missing] == ["toy.context"]
    assert "not implemented yet: toy.context" in health.message


def test_not_implemented_service_says_which_issue_brings_it(ros) -> None:  # type: ignore[no-untyped-def]
    node = make_node(ros)
    node.serve_not_implemented(GetContext, "memory/get_context", "toy.context")
    with RosSession("test_client") as session:
        response = session.call(GetContext, "/carryon/memory/get_context", GetContext.Request(user_id="a"), 10.0)
    assert response.status == GetContext.Response.STATUS_NOT_IMPLEMENTED
    assert "issue #99" in response.message


def test_service_status_codes_match_every_service() -> None:
    from carryon_common.core.status import ServiceStatus
    from carryon_interfaces.srv import Ask, SetEstop, SimState, UpdateUser

    for srv in (GetContext, Ask, SetEstop, SimState, UpdateUser):
        for status in ServiceStatus:
            assert getattr(srv.Response, f"STATUS_{status.name}") == status.value, (srv, status)


def test_not_implemented_action_aborts_with_a_result_and_the_helper_returns_it(ros) -> None:  # type: ignore[no-untyped-def]
    from action_msgs.msg import GoalStatus

    from carryon_interfaces.action import Assist

    node = make_node(ros)

    def fill(result: Assist.Result, message: str) -> None:
        result.status = Assist.Result.STATUS_NOT_IMPLEMENTED
        result.message = message

    node.action_not_implemented(Assist, "planner/assist", "toy.context", fill)
    with RosSession("test_client") as session:
        status, result = session.send_goal_and_wait(
            Assist, "/carryon/planner/assist", Assist.Goal(user_id="alice", text="Serve me food"),
            server_timeout_s=10.0, result_timeout_s=10.0,
        )  # fmt: skip
    assert status == GoalStatus.STATUS_ABORTED
    assert result.status == Assist.Result.STATUS_NOT_IMPLEMENTED
    assert "issue #99" in result.message


def test_unreachable_service_and_action_time_out_quickly(ros) -> None:  # type: ignore[no-untyped-def]
    import time

    from carryon_common.calls import GraphUnreachable
    from carryon_interfaces.action import Assist

    with RosSession("test_client") as session:
        started = time.monotonic()
        with pytest.raises(GraphUnreachable, match=r"not available after 0\.5 s"):
            session.call(GetStatus, "/carryon/nobody/get_status", GetStatus.Request(), 0.5)
        with pytest.raises(GraphUnreachable, match="action server /carryon/nobody/act is not available"):
            session.send_goal_and_wait(
                Assist, "/carryon/nobody/act", Assist.Goal(), server_timeout_s=0.5, result_timeout_s=0.5
            )
        assert time.monotonic() - started < 3.0


def test_an_unavailable_service_says_which_domain_and_which_nodes_the_client_saw(wait_until) -> None:  # type: ignore[no-untyped-def]
    """'Not available' tells an operator where the client looked: its own domain (not the
    shell's), and whether it discovered no node at all (wrong domain, no graph, discovery
    failed) or a graph without the service asked for."""
    from carryon_bringup.core.domain import reserve_domain_id
    from carryon_common.calls import GraphUnreachable

    domain = reserve_domain_id([int(os.environ.get("ROS_DOMAIN_ID", "0"))])
    try:
        with RosSession("lonely", domain_id=domain.domain_id) as session:
            with pytest.raises(GraphUnreachable) as alone:
                session.call(GetStatus, "/carryon/nobody/get_status", GetStatus.Request(), 0.3)
            assert f"ROS_DOMAIN_ID={domain.domain_id}," in str(alone.value)
            assert "discovered no other node" in str(alone.value)
            with RosSession("peer", domain_id=domain.domain_id) as peer:
                peer_name = f"{peer.node.get_name()}"
                assert wait_until(lambda: peer_name in session.where(), 20.0)
                with pytest.raises(GraphUnreachable, match=rf"discovered 1 other node\(s\): {peer_name}\)$"):
                    session.call(GetStatus, "/carryon/nobody/get_status", GetStatus.Request(), 0.3)
    finally:
        domain.release()


def test_readiness_checks_degrade_the_node_with_their_reasons_and_recover(ros, wait_until) -> None:  # type: ignore[no-untyped-def]
    node = make_node(ros)
    inputs = {"camera": False}
    node.add_readiness_check(lambda: None if inputs["camera"] else "no camera images yet")
    node.add_readiness_check(lambda: None)
    node.set_ready()
    health = node.health()
    assert health.state == NodeState.DEGRADED and health.message == "no camera images yet" and health.ready
    inputs["camera"] = True
    assert wait_until(lambda: node.health().state == NodeState.READY, 5.0)
    assert node.health().message.startswith("ready; not implemented yet: toy.context")
    inputs["camera"] = False
    assert wait_until(lambda: node.health().state == NodeState.DEGRADED, 5.0)


def test_a_failing_readiness_check_is_a_reason_not_a_crash(ros) -> None:  # type: ignore[no-untyped-def]
    node = make_node(ros)
    node.add_readiness_check(lambda: str(1 / 0))
    node.set_ready()
    assert node.health().state == NodeState.DEGRADED
    assert node.health().message == "readiness check failed: ZeroDivisionError: division by zero"


def test_use_sim_time_is_fixed_once_the_node_runs(ros) -> None:  # type: ignore[no-untyped-def]
    """A parameter call must not switch a running node onto a /clock someone else publishes
    (issue 43: on a robot, rclpy's use_sim_time stayed writable)."""
    node = make_node(ros)
    result = node.set_parameters([Parameter("use_sim_time", value=True)])[0]
    assert not result.successful and "fixed" in result.reason
    assert node.get_parameter("use_sim_time").value is False and not node.get_clock().ros_time_is_active
