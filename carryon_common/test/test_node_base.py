"""CarryOnNode in-process: parameters from the config class, status service, scaffolding."""

from __future__ import annotations

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


def test_status_service_reports_state_and_missing_capabilities(ros) -> None:  # type: ignore[no-untyped-def]
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
    assert health.backends == ("policy=toy",)
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
