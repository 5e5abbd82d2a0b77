"""shield_node in-process with fake peers: estop latch and fail-closed gating."""

from __future__ import annotations

import time

import numpy as np
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


def _sensor_peer(ros, shield):  # type: ignore[no-untyped-def]
    """A fake robot driver: one overhead RGB-D + segmentation camera ('scene'), the tool
    pose, the arm's joints and the gripper width, republished with fresh stamps by `publish()`."""
    import numpy as np
    from geometry_msgs.msg import PoseStamped
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import CameraInfo, Image, JointState
    from std_msgs.msg import Float64
    from test_shield_grounding import overhead_frame

    from carryon_common import convert as common_convert
    from carryon_interfaces.msg import SegmentationLabels
    from carryon_robot.core.kinematics import load_robot
    from carryon_sim import convert as sim_convert
    from carryon_sim.core.cameras import CameraFrame

    peer = ros.peer("fake_driver")
    topics = ("color", "depth", "segmentation", "labels", "camera_info", "pose")
    types = (Image, Image, Image, SegmentationLabels, CameraInfo, PoseStamped)
    pubs = [
        peer.create_publisher(t, f"camera/scene/{name}", qos_profile_sensor_data if t is Image else 10)
        for name, t in zip(topics, types, strict=True)
    ]
    pose_pub = peer.create_publisher(PoseStamped, "ee_pose", 10)
    width_pub = peer.create_publisher(Float64, "gripper/width", 10)
    joints_pub = peer.create_publisher(JointState, "joint_states", 10)
    frame = overhead_frame()
    down = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
    tool = np.array([0.5, 0.0, 0.6])
    kinematics = load_robot("").kinematics()
    ready = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])
    joints = kinematics.inverse(ready, tool, down, max_iterations=200).q  # the arm with its tool there

    def publish() -> None:
        stamp = shield.get_clock().now().to_msg()
        camera = CameraFrame("scene", np.zeros((*frame.depth.shape, 3), dtype=np.uint8), frame.depth,
                             frame.segmentation, frame.labels, frame.K, frame.world_from_camera, 0.0)  # fmt: skip
        msgs = sim_convert.camera_msgs(camera, "scene_camera_optical", stamp)
        width_pub.publish(Float64(data=0.08))
        joints_pub.publish(common_convert.joint_state_msg(list(kinematics.joint_names), joints, stamp))
        pose_pub.publish(common_convert.pose_msg(tool, down, stamp))
        for index in (5, 4, 3, 0, 2, 1):  # depth last: it completes a frame
            pubs[index].publish(msgs[index])

    def publish_until_perceived() -> None:
        for _ in range(100):
            publish()
            time.sleep(0.05)
            if shield.perception.frames and shield.perception.state is not None:
                publish()
                time.sleep(0.05)
                return
        raise AssertionError("the shield never received the fake sensors")

    return peer, publish_until_perceived, pubs


def _patient() -> list:  # type: ignore[type-arg]
    from rclpy.parameter import Parameter

    # These tests are about geometry and grounding, not staleness (tested in test_gate and
    # test_shield_perception): in one process on a busy machine a callback can wait longer
    # than the default 0.5 s ages.
    ages = ("max_observation_age_s", "max_state_age_s", "max_depth_age_s", "max_mask_age_s")
    return [Parameter(name, value=5.0) for name in ages]


_PATIENT = _patient()


def line_msg(node, chunk_id: int, dx: float, n: int = 16) -> ActionChunk:  # type: ignore[no-untyped-def]
    msg = policy_chunk(node, chunk_id)
    msg.convention = ActionChunk.CONVENTION_DELTA
    msg.steps = [ActionStep(gripper=0.0) for _ in range(n)]
    for step in msg.steps:
        step.position.x = dx
    return msg


def test_shield_filters_chunks_from_fake_sensors(ros, wait_until) -> None:  # type: ignore[no-untyped-def]
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import PointCloud2
    from visualization_msgs.msg import Marker, MarkerArray

    from carryon_interfaces.srv import SetTask
    from carryon_shield.convert import cloud_points

    shield = ros.add(
        ShieldNode(
            namespace="carryon",
            context=ros.context,
            parameter_overrides=[Parameter("cameras", value=["scene"]), *_PATIENT],
        )
    )
    peer, publish, pubs = _sensor_peer(ros, shield)
    events: list[ShieldEvent] = []
    released: list[ActionChunk] = []
    markers: list[MarkerArray] = []
    clouds: list[PointCloud2] = []
    peer.create_subscription(ShieldEvent, "shield/events", events.append, 10)
    peer.create_subscription(ActionChunk, "shield/chunk", released.append, 10)
    peer.create_subscription(MarkerArray, "shield/markers", markers.append, 10)
    peer.create_subscription(PointCloud2, "shield/obstacles", clouds.append, 10)
    chunks = peer.create_publisher(ActionChunk, "policy/chunk", 10)
    assert wait_until(lambda: chunks.get_subscription_count() > 0 and pubs[1].get_subscription_count() > 0, 10.0)

    with RosSession("task_client") as session:
        request = SetTask.Request(subtask_id="s1", target="carrot", source="table", destination="bowl")
        response = session.call(SetTask, "/carryon/shield/set_task", request, 10.0)
    assert response.status == SetTask.Response.STATUS_OK and "bowl" in response.message

    def send(chunk_id: int, dx: float) -> ShieldEvent:
        count = len(events)
        publish()
        chunks.publish(line_msg(shield, chunk_id, dx))
        assert wait_until(lambda n=count: len(events) > n, 10.0)
        return events[-1]

    # Towards the bottle (+x, bottle at x 0.70-0.76, 0.62 m tall): only a prefix. Sent
    # first: this fake arm never moves, so once a chunk is released the shield chains
    # delta steps from the target under way, and a chunk after a -x one would start far
    # from the bottle (a race with the next ee_pose made this test flaky).
    blocked = send(1, 0.01)
    assert blocked.decision == ShieldEvent.DECISION_RELEASED_PREFIX, blocked.reason
    assert 0 < blocked.released_steps < 16 and blocked.blocking_obstacle == "bottle"
    assert wait_until(lambda: released, 5.0) and len(released[-1].steps) == blocked.released_steps
    assert wait_until(lambda: markers and clouds, 5.0)
    shown = {m.id: m for m in markers[-1].markers if m.ns == "shield"}
    assert shown[0].action == Marker.ADD and shown[1].action == Marker.ADD  # released and blocked paths
    assert len(shown[0].points) == blocked.released_steps + 1
    assert shown[3].action == Marker.ADD and shown[2].action == Marker.DELETE  # nearest point; no retreat
    assert shown[5].action == Marker.DELETE  # nothing held: no carried object shown

    # Away from the bottle (towards -x): clear, released whole.
    clear = send(2, -0.01)
    assert clear.decision == ShieldEvent.DECISION_RELEASED_ALL, clear.reason
    assert wait_until(lambda: len(released) == 2, 5.0) and len(released[-1].steps) == 16
    assert clear.obstacle_points > 0 and clear.min_distance_m > 0.0

    points = cloud_points(clouds[-1])
    assert len(points) == blocked.obstacle_points or len(points) > 0
    assert np.isclose(points[:, 2].max(), 0.62, atol=1e-3)  # the bottle top is in the cloud


def test_the_carried_object_is_shown_as_its_spheres() -> None:
    from builtin_interfaces.msg import Time
    from visualization_msgs.msg import Marker

    from carryon_shield.convert import CARRIED, carried_marker

    spheres = np.array([[0.5, 0.1, 0.45, 0.0173], [0.52, 0.1, 0.45, 0.0173]])
    marker = carried_marker(spheres, "world", Time(sec=3))
    assert marker.id == CARRIED and marker.type == Marker.SPHERE_LIST and marker.action == Marker.ADD
    assert [(p.x, p.y, p.z) for p in marker.points] == [(0.5, 0.1, 0.45), (0.52, 0.1, 0.45)]
    assert np.isclose(marker.scale.x, 2 * 0.0173) and marker.header.frame_id == "world"
    assert carried_marker(np.zeros((0, 4)), "world", Time(sec=3)).action == Marker.DELETE


def test_disabled_shield_passes_chunks_through_and_reports(ros, wait_until) -> None:  # type: ignore[no-untyped-def]
    from rclpy.parameter import Parameter

    overrides = [Parameter("cameras", value=["scene"]), Parameter("enabled", value=False), *_PATIENT]
    shield = ros.add(ShieldNode(namespace="carryon", context=ros.context, parameter_overrides=overrides))
    peer, publish, pubs = _sensor_peer(ros, shield)
    events: list[ShieldEvent] = []
    released: list[ActionChunk] = []
    peer.create_subscription(ShieldEvent, "shield/events", events.append, 10)
    peer.create_subscription(ActionChunk, "shield/chunk", released.append, 10)
    chunks = peer.create_publisher(ActionChunk, "policy/chunk", 10)
    assert wait_until(lambda: chunks.get_subscription_count() > 0 and pubs[1].get_subscription_count() > 0, 10.0)
    publish()
    chunks.publish(line_msg(shield, 1, 0.01))
    assert wait_until(lambda: events and released, 10.0)
    assert events[0].decision == ShieldEvent.DECISION_RELEASED_ALL and len(released[0].steps) == 16
    assert events[0].first_blocked_step > 0 and "would have released" in events[0].reason


class _BlindGrounder:
    """A grounder that sees nothing: the shield must fail closed with its reason."""

    name = "blind"

    def __init__(self) -> None:
        self.calls = 0

    def ground(self, frames, task, self_filter=None, *, holding=False):  # type: ignore[no-untyped-def]
        from carryon_shield.core.types import PerceptionUnavailable

        self.calls += 1
        raise PerceptionUnavailable("the injected grounder sees nothing")


def test_an_injected_grounder_is_used_and_reported(ros, wait_until) -> None:  # type: ignore[no-untyped-def]
    from rclpy.parameter import Parameter

    blind = _BlindGrounder()
    shield = ros.add(
        ShieldNode(
            blind,
            namespace="carryon",
            context=ros.context,
            parameter_overrides=[Parameter("cameras", value=["scene"]), *_PATIENT],
        )
    )
    assert "grounder=_BlindGrounder" in shield.health().backends
    peer, publish, pubs = _sensor_peer(ros, shield)
    events: list[ShieldEvent] = []
    released: list[ActionChunk] = []
    peer.create_subscription(ShieldEvent, "shield/events", events.append, 10)
    peer.create_subscription(ActionChunk, "shield/chunk", released.append, 10)
    chunks = peer.create_publisher(ActionChunk, "policy/chunk", 10)
    assert wait_until(lambda: chunks.get_subscription_count() > 0 and pubs[1].get_subscription_count() > 0, 10.0)
    publish()
    assert wait_until(lambda: blind.calls > 0, 10.0)
    # Every chunk fails closed; on a busy machine some for stale inputs first, so try a few.
    for chunk_id in range(1, 11):
        count = len(events)
        publish()
        chunks.publish(line_msg(shield, chunk_id, -0.01))
        assert wait_until(lambda n=count: len(events) > n, 10.0)
        if "injected grounder sees nothing" in events[-1].reason:
            break
    assert "injected grounder sees nothing" in events[-1].reason, [e.reason for e in events]
    assert events[-1].decision == ShieldEvent.DECISION_REJECTED_NO_PERCEPTION
    assert not released


def test_masks_that_arrive_after_newer_depth_pair_with_their_own_depth(ros, wait_until) -> None:  # type: ignore[no-untyped-def]
    """perception_node publishes a frame's masks ~0.1 s after its depth, by when the camera has
    sent newer depth: the shield pairs masks with the depth and pose of their own stamp."""
    from rclpy.parameter import Parameter
    from test_shield_grounding import overhead_frame

    from carryon_common import convert as common_convert
    from carryon_sim import convert as sim_convert
    from carryon_sim.core.cameras import CameraFrame

    shield = ShieldNode(namespace="carryon", context=ros.context,
                        parameter_overrides=[*_PATIENT, Parameter("cameras", value=["scene"])])  # fmt: skip
    ros.add(shield)
    _, _, pubs = _sensor_peer(ros, shield)
    frame = overhead_frame()
    camera = CameraFrame("scene", np.zeros((*frame.depth.shape, 3), dtype=np.uint8), frame.depth,
                         frame.segmentation, frame.labels, frame.K, frame.world_from_camera, 0.0)  # fmt: skip
    now = shield.get_clock().now()
    older, newer = (now - rclpy_duration(0.2)).to_msg(), now.to_msg()
    msgs_old = sim_convert.camera_msgs(camera, "scene_camera_optical", older)
    msgs_new = sim_convert.camera_msgs(camera, "scene_camera_optical", newer)
    for index in (4, 5, 1):  # camera_info, pose, depth of the older instant
        pubs[index].publish(msgs_old[index])
    time.sleep(0.2)
    for index in (5, 1):  # the camera moves on: pose and depth of the newer instant
        pubs[index].publish(msgs_new[index])
    time.sleep(0.2)
    assert not shield.perception.frames  # no masks yet
    pubs[3].publish(msgs_old[3])  # labels, then segmentation of the older instant
    pubs[2].publish(msgs_old[2])
    assert wait_until(lambda: "scene" in shield.perception.frames, 5.0)
    assert shield.perception.frames["scene"].depth_stamp_s == common_convert.time_from_msg(older)


def rclpy_duration(seconds: float):  # type: ignore[no-untyped-def]
    from rclpy.duration import Duration

    return Duration(nanoseconds=int(seconds * 1e9))


def test_without_robot_state_or_frames_the_shield_is_degraded_and_says_why(ros) -> None:  # type: ignore[no-untyped-def]
    from carryon_common.core.status import NodeState

    shield = ros.add(ShieldNode(namespace="carryon", context=ros.context))
    health = shield.health()
    assert health.state == NodeState.DEGRADED and health.ready  # started, but cannot do its job
    assert health.message == "every chunk fails closed: no robot state (tool pose, gripper width) yet"
