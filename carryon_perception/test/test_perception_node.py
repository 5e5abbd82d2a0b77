"""perception_node in-process: simulator-rendered camera streams in (as a driver would
publish them), segmentation + labels and the perceived scene out; bad input reported."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from geometry_msgs.msg import PoseStamped
from rclpy.duration import Duration
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from rclpy.time import Time
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64

from carryon_common import convert as common_convert
from carryon_common.core.status import NodeState
from carryon_common.node import latched_qos
from carryon_interfaces.msg import PerceivedScene, PlanState, SegmentationLabels, Subtask, SubtaskState
from carryon_perception.core.build import build_tabletop
from carryon_perception.core.open_vocab import OpenVocabRecogniser
from carryon_perception.node import PerceptionNode
from carryon_sim.convert import camera_msgs
from carryon_sim.core.cameras import CameraFrame, CameraRig
from carryon_sim.core.scene import load_scene, scene_path, scenes_dir
from carryon_sim.core.world import ARM_JOINTS, SCENE_CAMERA, WRIST_CAMERA, World

CAMERAS = {"scene": SCENE_CAMERA, "wrist": WRIST_CAMERA}


@pytest.fixture(scope="module")
def rendered() -> tuple[World, dict[str, CameraFrame]]:
    world = World(load_scene(scene_path(scenes_dir(), "food_serving")), seed=0)
    rig = CameraRig(world.model, world.object_of_body, 128, 128)
    try:
        frames = {name: rig.render(world.data, mujoco_name) for name, mujoco_name in CAMERAS.items()}
    finally:
        rig.close()
    return world, frames


class Driver:
    """Publishes the rendered frames with fresh stamps, as a camera driver + arm would."""

    def __init__(  # type: ignore[no-untyped-def]
        self, peer, world: World, frames: dict[str, CameraFrame], *, joints: bool = True,
        pose_offset_s: dict[str, float] | None = None, later_q: np.ndarray | None = None,
    ) -> None:  # fmt: skip
        """`pose_offset_s`: a camera's pose stamped this much later than its images;
        `later_q`: after each frame, joint states of another arm pose stamped 0.2 s later
        (the arm moved on after the images were taken)."""
        self.peer, self.world, self.frames, self.joints = peer, world, dict(frames), joints
        self.pose_offset_s, self.later_q = pose_offset_s or {}, later_q
        self.later_stamps: list[Time] = []
        self.pubs = {
            name: [
                peer.create_publisher(Image, f"camera/{name}/color", qos_profile_sensor_data),
                peer.create_publisher(Image, f"camera/{name}/depth", qos_profile_sensor_data),
                None,  # the simulator's segmentation: a driver has none
                None,
                peer.create_publisher(CameraInfo, f"camera/{name}/camera_info", 10),
                peer.create_publisher(PoseStamped, f"camera/{name}/pose", 10),
            ]
            for name in frames
        }
        self.joint_pub = peer.create_publisher(JointState, "joint_states", 10)
        self.width_pub = peer.create_publisher(Float64, "gripper/width", 10)
        peer.create_timer(0.1, self.publish)

    def publish(self) -> None:
        now = self.peer.get_clock().now()
        if any(abs((now - later).nanoseconds) < 80_000_000 for later in self.later_stamps):
            # This frame falls within 80 ms of an earlier frame's later joint states (the one
            # just before after a late timer, or the one two frames back at a steady 10 Hz):
            # with its own not yet received, those (within max_joint_offset_s) would pose the
            # robot swung (CI runs saw the arm left as unknown objects). A driver streaming
            # joint states at its rate has none so far off; skip the frame instead.
            return
        stamp = now.to_msg()
        # The joint states of the images' instant first, as a driver streaming them at a far
        # higher rate than the cameras would have them there: published after the images, a
        # late timer on a loaded machine left the 0.2 s later ones nearest to the images.
        if self.joints:
            self.joint_pub.publish(common_convert.joint_state_msg(list(ARM_JOINTS), self.world.arm_q(), stamp))
            self.width_pub.publish(Float64(data=float(self.world.gripper_width())))
        for name, frame in self.frames.items():
            for pub, msg in zip(self.pubs[name], camera_msgs(frame, f"{name}_camera_optical", stamp), strict=True):
                if pub is not None:
                    if isinstance(msg, PoseStamped) and name in self.pose_offset_s:
                        msg.header.stamp = (now + Duration(seconds=self.pose_offset_s[name])).to_msg()
                    pub.publish(msg)
        if self.later_q is not None:
            later = now + Duration(seconds=0.2)
            self.later_stamps = [*self.later_stamps[-4:], later]
            self.joint_pub.publish(common_convert.joint_state_msg(list(ARM_JOINTS), self.later_q, later.to_msg()))


class Listener:
    def __init__(self, peer) -> None:  # type: ignore[no-untyped-def]
        self.images: dict[str, list[Image]] = {"scene": [], "wrist": []}
        self.labels: dict[str, list[dict[int, str]]] = {"scene": [], "wrist": []}
        self.scenes: list[PerceivedScene] = []
        for name in self.images:
            peer.create_subscription(
                Image, f"camera/{name}/segmentation", self.images[name].append, qos_profile_sensor_data
            )
            peer.create_subscription(
                SegmentationLabels,
                f"camera/{name}/labels",
                lambda m, n=name: self.labels[n].append(common_convert.labels_from_msg(m)),
                10,
            )
        peer.create_subscription(PerceivedScene, "perception/scene", self.scenes.append, 10)


def start(ros, config_dir: Path, **params):  # type: ignore[no-untyped-def]
    perception = build_tabletop(config_dir, "food_serving", ["pink_cover", "carrot", "plate", "meat", "bowl", "bottle"])
    overrides = [Parameter(k, value=v) for k, v in {"rate_hz": 10.0, "max_image_age_s": 2.0, **params}.items()]
    node = PerceptionNode(perception, namespace="carryon", context=ros.context, parameter_overrides=overrides)
    ros.add(node)
    return node, ros.peer("fake_driver")


def test_publishes_stable_labelled_segmentation_and_the_scene(ros, config_dir, wait_until, rendered) -> None:  # type: ignore[no-untyped-def]
    world, frames = rendered
    node, peer = start(ros, config_dir)
    listener = Listener(peer)
    Driver(peer, world, frames)
    assert wait_until(lambda: len(listener.scenes) >= 3 and all(len(v) >= 3 for v in listener.labels.values()), 30.0)
    scene_labels = listener.labels["scene"][-1]
    assert {"robot", "table", "bowl", "plate", "pink_cover", "bottle"} <= set(scene_labels.values())
    assert not any(n.startswith("unknown_") for n in scene_labels.values()), (
        scene_labels,
        [(o.label, len(o.points), o.centroid) for o in listener.scenes[-1].objects],
    )
    # identities are stable frame to frame (the judge compares a baseline with now)
    assert listener.labels["scene"][0] == listener.labels["scene"][-1]
    image = common_convert.image_array(listener.images["scene"][-1])
    assert image.shape == frames["scene"].depth.shape
    bowl = next(i for i, n in scene_labels.items() if n == "bowl")
    truth_bowl = frames["scene"].segmentation == next(i for i, n in frames["scene"].labels.items() if n == "bowl")
    overlap = (image == bowl) & truth_bowl
    assert overlap.sum() / (truth_bowl | (image == bowl)).sum() > 0.7
    objects = {o.label: o for o in listener.scenes[-1].objects}
    assert objects["bowl"].region == "dining_table" and objects["bowl"].support == "table"
    assert objects["meat"].support == "plate"
    assert [p.label for p in listener.scenes[-1].planes][:1] == ["table"]
    assert abs(listener.scenes[-1].planes[0].height - 0.42) < 0.01
    assert listener.scenes[-1].diagnostics == [] and node.health().state == NodeState.READY


def test_without_joint_states_nothing_is_published_and_status_says_why(ros, config_dir, wait_until, rendered) -> None:  # type: ignore[no-untyped-def]
    world, frames = rendered
    node, peer = start(ros, config_dir)
    listener = Listener(peer)
    Driver(peer, world, frames, joints=False)
    assert wait_until(lambda: node.health().state == NodeState.DEGRADED, 15.0)
    assert "joint_states" in node.health().message
    assert not listener.images["scene"] and not listener.scenes


def test_a_malformed_camera_is_left_out_and_named(ros, config_dir, wait_until, rendered) -> None:  # type: ignore[no-untyped-def]
    world, frames = rendered
    broken = dict(frames)
    wrist = frames["wrist"]
    # colour and depth of different sizes: the wrist camera cannot be perceived, the scene camera still is
    broken["wrist"] = CameraFrame(
        wrist.camera, wrist.rgb[:64], wrist.depth, wrist.segmentation, wrist.labels, wrist.K,
        wrist.world_from_camera, wrist.stamp_s,
    )  # fmt: skip
    node, peer = start(ros, config_dir)
    listener = Listener(peer)
    Driver(peer, world, broken)
    assert wait_until(lambda: len(listener.scenes) >= 2, 30.0)
    assert any("camera wrist" in d and "sizes differ" in d for d in listener.scenes[-1].diagnostics)
    assert listener.images["scene"] and not listener.images["wrist"]
    assert node.health().state == NodeState.DEGRADED and "camera wrist" in node.health().message
    assert np.all(np.isfinite([o.centroid.x for o in listener.scenes[-1].objects]))


def test_the_robot_is_posed_at_the_images_instant(ros, config_dir, wait_until, rendered) -> None:  # type: ignore[no-untyped-def]
    """The self-filter poses the robot from the joint states of the images' instant, not
    the latest: the arm swung 1 rad on after the images were taken, and posed from those
    joint states the arm in the images would stay behind as objects."""
    world, frames = rendered
    swung = world.arm_q().copy()
    swung[0] += 1.0
    _node, peer = start(ros, config_dir)
    listener = Listener(peer)
    Driver(peer, world, frames, later_q=swung)
    assert wait_until(lambda: len(listener.scenes) >= 3 and len(listener.labels["scene"]) >= 3, 30.0)
    assert "robot" in listener.labels["scene"][-1].values()
    for scene in listener.scenes:
        assert not any(o.label.startswith("unknown_") for o in scene.objects), [
            (o.label, len(o.points)) for o in scene.objects
        ]


def test_a_camera_without_a_pose_of_its_instant_is_left_out(ros, config_dir, wait_until, rendered) -> None:  # type: ignore[no-untyped-def]
    world, frames = rendered
    node, peer = start(ros, config_dir)
    listener = Listener(peer)
    Driver(peer, world, frames, pose_offset_s={"wrist": 10.0})  # the wrist's pose is of another instant
    assert wait_until(lambda: len(listener.scenes) >= 2, 30.0)
    assert not listener.images["wrist"] and listener.images["scene"]
    assert any("camera wrist" in d and "no pose stamped within 20 ms" in d for d in listener.scenes[-1].diagnostics)
    assert node.health().state == NodeState.DEGRADED and "camera wrist" in node.health().message


def test_the_open_vocab_detector_asks_for_what_the_running_plan_names(ros, config_dir, wait_until) -> None:  # type: ignore[no-untyped-def]
    perception = build_tabletop(config_dir, "food_serving", ["bowl", "plate"])
    # The recogniser's model is never called here: no camera publishes.
    perception.recogniser = OpenVocabRecogniser((None, None, None, None), None, ["bowl", "plate"])
    node = PerceptionNode(perception, namespace="carryon", context=ros.context)
    ros.add(node)
    peer = ros.peer("fake_planner")
    plans = peer.create_publisher(PlanState, "planner/plan_state", latched_qos(10))

    def plan(state: int, active: str) -> PlanState:
        fetch = Subtask(id="fetch", kind="vla", target="carrot", source="kitchen_counter", destination="bowl")
        serve = Subtask(id="serve", kind="vla", target="meat", destination="plate")
        steps = [SubtaskState(subtask=fetch), SubtaskState(subtask=serve)]
        return PlanState(plan_id="p1", state=state, subtasks=steps, active_subtask_id=active)

    assert "open_vocab prompts: bowl, plate" in node.health().message
    plans.publish(plan(PlanState.STATE_EXECUTING, "serve"))
    # the active subtask's objects first; kitchen_counter is a place (a region), not an object
    assert wait_until(lambda: perception.recogniser.prompts == ("meat", "plate", "carrot", "bowl"), 10.0)
    assert wait_until(lambda: "open_vocab prompts: meat, plate, carrot, bowl" in node.health().message, 5.0)
    plans.publish(plan(PlanState.STATE_SUCCEEDED, ""))
    assert wait_until(lambda: perception.recogniser.prompts == ("bowl", "plate"), 10.0)
