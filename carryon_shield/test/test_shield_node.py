"""shield_node in-process with fake peers: estop latch and fail-closed gating."""

from __future__ import annotations

from builtin_interfaces.msg import Time

from carryon_common.calls import RosSession
from carryon_common.node import latched_qos
from carryon_interfaces.msg import ActionChunk, ActionStep, EstopState, ShieldEvent
from carryon_interfaces.srv import SetEstop
from carryon_shield.node import ShieldNode


def policy_chunk(node, chunk_id: int) -> ActionChunk:  # type: ignore[no-untyped-def]
    msg = ActionChunk(chunk_id=chunk_id, subtask_id="s1", dt=0.05, observation_id=1)
    msg.header.frame_id = "world"
    msg.observation_stamp = node.get_clock().now().to_msg()
    msg.steps = [ActionStep(gripper=0.0) for _ in range(4)]
    return msg


def test_chunks_are_answered_and_never_released_without_filter(ros, wait_until) -> None:  # type: ignore[no-untyped-def]
    shield = ros.add(ShieldNode(namespace="carryon", context=ros.context))

    peer = ros.peer("fake_policy")
    events: list[ShieldEvent] = []
    released: list[ActionChunk] = []
    estop_states: list[EstopState] = []
    peer.create_subscription(ShieldEvent, "shield/events", events.append, 10)
    peer.create_subscription(ActionChunk, "shield/chunk", released.append, 10)
    peer.create_subscription(EstopState, "estop/state", estop_states.append, latched_qos())
    pub = peer.create_publisher(ActionChunk, "policy/chunk", 10)

    assert wait_until(lambda: pub.get_subscription_count() > 0 and estop_states, 10.0)
    assert estop_states[-1].active is False  # latched initial state reaches a late subscriber

    pub.publish(policy_chunk(shield, 1))
    assert wait_until(lambda: len(events) >= 1, 5.0)
    assert events[0].decision == ShieldEvent.DECISION_REJECTED_NO_PERCEPTION
    assert events[0].released_steps == 0 and events[0].total_steps == 4

    stale = policy_chunk(shield, 2)
    stale.observation_stamp = Time(sec=1)
    pub.publish(stale)
    assert wait_until(lambda: len(events) >= 2, 5.0)
    assert events[1].decision == ShieldEvent.DECISION_REJECTED_STALE

    with RosSession("estop_client") as session:
        response = session.call(
            SetEstop, "/carryon/estop/set", SetEstop.Request(active=True, reason="test", source="pytest"), 10.0
        )
    assert response.state.active
    assert wait_until(lambda: estop_states[-1].active, 5.0)
    pub.publish(policy_chunk(shield, 3))
    assert wait_until(lambda: len(events) >= 3, 5.0)
    assert events[2].decision == ShieldEvent.DECISION_REJECTED_ESTOP
    assert released == []


def test_estop_can_be_engaged_and_released_repeatedly(ros) -> None:  # type: ignore[no-untyped-def]
    ros.add(ShieldNode(namespace="carryon", context=ros.context))
    with RosSession("estop_client") as session:
        for active in (True, False, True, False):
            request = SetEstop.Request(active=active, reason="cycle", source="pytest")
            response = session.call(SetEstop, "/carryon/estop/set", request, 10.0)
            assert response.status == SetEstop.Response.STATUS_OK
            assert response.state.active is active


def test_shield_can_start_with_the_estop_engaged(ros, wait_until) -> None:  # type: ignore[no-untyped-def]
    from rclpy.parameter import Parameter

    shield = ros.add(
        ShieldNode(
            namespace="carryon",
            context=ros.context,
            parameter_overrides=[Parameter("estop_engaged_at_start", value=True)],
        )
    )
    peer = ros.peer("fake_policy")
    states: list[EstopState] = []
    events: list[ShieldEvent] = []
    peer.create_subscription(EstopState, "estop/state", states.append, latched_qos())
    peer.create_subscription(ShieldEvent, "shield/events", events.append, 10)
    pub = peer.create_publisher(ActionChunk, "policy/chunk", 10)
    assert wait_until(lambda: states and pub.get_subscription_count() > 0, 10.0)
    assert states[-1].active
    pub.publish(policy_chunk(shield, 1))
    assert wait_until(lambda: events, 5.0)
    assert events[0].decision == ShieldEvent.DECISION_REJECTED_ESTOP
