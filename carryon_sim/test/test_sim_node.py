"""sim_node in-process with fake peers: state topics, executing shielded chunks, services."""

from __future__ import annotations

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image, JointState

from carryon_common import convert as common_convert
from carryon_common.calls import RosSession
from carryon_common.core.chunk import Chunk, ChunkSource, Convention
from carryon_interfaces.msg import ActionChunk, SegmentationLabels, SimTruth
from carryon_interfaces.srv import SetTask, SimPerturb, SimReset, SimState
from carryon_sim.node import SimNode


def test_sim_node_publishes_state_executes_chunks_and_answers_services(ros, wait_until) -> None:  # type: ignore[no-untyped-def]
    sim = ros.add(
        SimNode(
            namespace="carryon",
            context=ros.context,
            parameter_overrides=[Parameter("camera_width", value=64), Parameter("camera_height", value=48)],
        )
    )
    peer = ros.peer("fake_shield")
    poses: list[PoseStamped] = []
    joints: list[JointState] = []
    depth: list[Image] = []
    labels: list[SegmentationLabels] = []
    peer.create_subscription(PoseStamped, "ee_pose", poses.append, 10)
    peer.create_subscription(JointState, "joint_states", joints.append, 10)
    peer.create_subscription(Image, "camera/scene/depth", depth.append, qos_profile_sensor_data)  # best effort
    peer.create_subscription(SegmentationLabels, "sim/camera/scene/labels", labels.append, 10)  # truth: evaluation only
    truth: list[SimTruth] = []
    peer.create_subscription(SimTruth, "sim/truth", truth.append, 10)
    clock: list[Clock] = []
    peer.create_subscription(Clock, "/clock", clock.append, 10)
    pub = peer.create_publisher(ActionChunk, "shield/chunk", 10)
    assert wait_until(lambda: poses and joints and depth and labels and pub.get_subscription_count() > 0, 20.0)
    assert len(joints[-1].position) == 9
    assert depth[-1].encoding == "32FC1" and (depth[-1].height, depth[-1].width) == (48, 64)
    assert "carrot" in labels[-1].names
    assert wait_until(lambda: len(clock) > 2 and truth, 5.0)
    assert {o.name for o in truth[-1].objects} >= {"carrot", "pink_cover", "bowl"}
    assert clock[-1].clock.sec * 1e9 + clock[-1].clock.nanosec > clock[0].clock.sec * 1e9 + clock[0].clock.nanosec
    start = np.array([poses[-1].pose.position.x, poses[-1].pose.position.y, poses[-1].pose.position.z])

    steps = np.tile([0.0, 0.0, -0.005], (10, 1))
    chunk = Chunk(1, "s1", ChunkSource.POLICY, Convention.DELTA, "world", 0.05, 1, 0.0, steps, np.zeros((10, 3)),
                  np.zeros(10))  # fmt: skip
    pub.publish(common_convert.chunk_to_msg(chunk, sim.get_clock().now().to_msg()))

    def tool_z() -> float:
        return float(poses[-1].pose.position.z)

    assert wait_until(lambda: tool_z() < start[2] - 0.04, 10.0)  # moved 5 cm down

    with RosSession("sim_client") as session:
        state = session.call(SimState, "/carryon/sim/state", SimState.Request(), 10.0)
        assert state.status == SimState.Response.STATUS_OK and state.scene == "food_serving"
        carrot = next(o for o in state.objects if o.name == "carrot")
        assert carrot.covered_by == "pink_cover" and carrot.location == "kitchen_counter"
        assert not carrot.in_contact  # touching only its cover and the table
        assert next(o for o in state.objects if o.name == "meat").inside == "plate"
        request = SimPerturb.Request(kind=SimPerturb.Request.KIND_DISPLACE, object="carrot")
        request.displacement.x = 0.12
        assert session.call(SimPerturb, "/carryon/sim/perturb", request, 10.0).status == 0
        moved = session.call(SimState, "/carryon/sim/state", SimState.Request(), 10.0)
        after = next(o for o in moved.objects if o.name == "carrot")
        assert abs(after.pose.position.x - carrot.pose.position.x - 0.12) < 0.01  # the 12 cm displacement
        bad = SimPerturb.Request(kind=SimPerturb.Request.KIND_RELOCATE, object="carrot", location="garage")
        assert session.call(SimPerturb, "/carryon/sim/perturb", bad, 10.0).status == 1  # unknown location
        uncover = SimPerturb.Request(kind=SimPerturb.Request.KIND_UNCOVER, object="pink_cover")
        assert session.call(SimPerturb, "/carryon/sim/perturb", uncover, 10.0).status == 0
        task = SetTask.Request(target="carrot", source="pink_cover", destination="bowl")
        assert session.call(SetTask, "/carryon/sim/set_task", task, 10.0).status == 0
        unknown = SetTask.Request(target="pizza")
        assert session.call(SetTask, "/carryon/sim/set_task", unknown, 10.0).status == 2  # not found
        reset = session.call(SimReset, "/carryon/sim/reset", SimReset.Request(seed=0), 10.0)
        assert reset.status == 0 and "carrot" in reset.objects
