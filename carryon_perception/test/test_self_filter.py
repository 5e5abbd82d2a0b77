"""The robot self-filter: the Panda URDF's collision surface posed by joint states, checked
against exact distances, a tiny URDF of primitives, and the simulator's robot segmentation."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import mujoco
import numpy as np
import pytest
from scipy.spatial import cKDTree

from carryon_common.core.config import read_yaml
from carryon_common.core.depth import points_by_label
from carryon_common.core.errors import CarryOnError, ConfigError
from carryon_perception.core.self_filter import MissingJoints, RobotSelfFilter, sample_triangles
from carryon_robot.core.kinematics import RobotDescription, load_robot
from carryon_sim.core.cameras import CameraRig
from carryon_sim.core.scene import load_scene, scene_path, scenes_dir
from carryon_sim.core.world import ARM_JOINTS as SIM_ARM_JOINTS
from carryon_sim.core.world import HOME_Q, SCENE_CAMERA, WRIST_CAMERA, World

ARM_JOINTS = tuple(f"panda_joint{i}" for i in range(1, 8))  # the URDF's names (the simulator's are the same)
HOME = dict(zip(ARM_JOINTS, HOME_Q, strict=True))


@pytest.fixture(scope="module")
def panda(config_dir: Path) -> RobotDescription:
    return load_robot(str(config_dir / "robot" / "panda.yaml"))


@pytest.fixture(scope="module")
def self_filter(panda: RobotDescription) -> RobotSelfFilter:
    return RobotSelfFilter(panda)


def nearest(surface: np.ndarray, points: np.ndarray) -> np.ndarray:
    distance, _ = cKDTree(surface).query(np.atleast_2d(points))
    return np.asarray(distance)


# -- unit: the Panda at home ------------------------------------------------------------------
def test_hand_fingertips_and_base_are_masked_far_points_are_not(
    self_filter: RobotSelfFilter, panda: RobotDescription
) -> None:
    # where the hand and fingertips are, from the arm's own kinematics (an independent path)
    tcp, rotation = panda.kinematics().forward(np.array(HOME_Q))
    opening, along = rotation[:, 0], rotation[:, 2]  # tool x: finger opening; tool z: out of the hand
    base = np.array(panda.base_xyz)
    on_robot = np.array(
        [
            tcp + 0.04 * opening,  # left fingertip (open gripper: 8 cm)
            tcp - 0.04 * opening,  # right fingertip
            tcp - 0.0965 * along,  # flange, where the hand meets link 7
            base,  # base centre, on the table
            base + np.array([0.0, 0.0, 0.14]),  # top of link 0
        ]
    )
    far = np.array([tcp + 0.12 * along, base + np.array([0.8, 0.4, 0.2]), base + np.array([0.0, 0.0, 1.4])])
    surface = self_filter.surface_points(HOME)
    assert nearest(surface, far).min() > 0.095  # 10 cm from every link
    mask = self_filter.mask(np.concatenate([on_robot, far]), HOME)
    assert mask.tolist() == [True] * len(on_robot) + [False] * len(far)


def test_closing_the_gripper_brings_the_fingers_to_the_tool_centre_point(
    self_filter: RobotSelfFilter, panda: RobotDescription
) -> None:
    tcp, _ = panda.kinematics().forward(np.array(HOME_Q))
    assert not self_filter.mask(tcp[None], HOME)[0]  # open: each fingertip 4 cm away
    assert self_filter.mask(tcp[None], HOME, gripper_width_m=0.0)[0]
    # finger joints given by name win over the width
    closed = {**HOME, "panda_finger_joint1": 0.0, "panda_finger_joint2": 0.0}
    assert self_filter.mask(tcp[None], closed, gripper_width_m=0.08)[0]
    open_points = self_filter.surface_points(HOME)
    assert np.allclose(open_points, self_filter.surface_points(HOME, gripper_width_m=0.08))
    assert not np.allclose(open_points, self_filter.surface_points(HOME, gripper_width_m=0.02))


def test_measured_finger_positions_are_used_as_given_and_the_width_is_clipped(
    self_filter: RobotSelfFilter, panda: RobotDescription
) -> None:
    # a simulated finger pressed 2 mm past its limit (an off-centre grasp) is where it is
    past = {**HOME, "panda_finger_joint1": -0.002, "panda_finger_joint2": 0.038}
    at_limit = {**HOME, "panda_finger_joint1": 0.0, "panda_finger_joint2": 0.038}
    moved = np.linalg.norm(self_filter.surface_points(past) - self_filter.surface_points(at_limit), axis=1)
    assert moved.max() == pytest.approx(0.002, abs=1e-9)
    # a width beyond the open gripper's is noise: each finger stops at its limit
    wide = self_filter.surface_points(HOME, gripper_width_m=0.1)
    assert np.allclose(wide, self_filter.surface_points(HOME, gripper_width_m=panda.gripper_open_width_m))


def test_fingers_off_centre_are_masked_where_they_are_not_where_the_width_puts_them(
    panda: RobotDescription,
) -> None:
    """The simulated fingers move independently: after an off-centre grasp one finger is at the
    centre line and the other 3.8 cm out (width 3.8 cm). Posed from the width alone, both would
    sit 1.9 cm from the hand's centre, one of them in free space beside the real finger, where
    an obstacle's points would vanish from the shield's view."""
    self_filter = RobotSelfFilter(panda, tool_margin_m=0.004)
    measured = {**HOME, "panda_finger_joint1": 0.0, "panda_finger_joint2": 0.038}
    real = self_filter.surface_points(measured)
    phantom = self_filter.surface_points(HOME, gripper_width_m=0.038)[self_filter.on_tool]
    free = phantom[nearest(real, phantom) > 0.01]  # 1 cm from the real robot: free space
    assert len(free) > 100
    assert not self_filter.mask(free, measured, gripper_width_m=0.038).any()
    assert self_filter.mask(free, HOME, gripper_width_m=0.038).all()


def test_the_tool_is_sampled_densely_enough_for_its_margin(panda: RobotDescription) -> None:
    """Tool samples at most half the tool margin apart: every point of the hand's and the
    fingers' surface lies within the margin of one (up to a chance of about 4e-6 each)."""
    tight = RobotSelfFilter(panda, tool_margin_m=0.004)
    assert tight.tool_spacing_m == pytest.approx(0.002)
    assert RobotSelfFilter(panda, tool_margin_m=0.02).tool_spacing_m == pytest.approx(tight.spacing_m)
    dense = RobotSelfFilter(panda, tool_margin_m=0.002, seed=1)  # the same surface, 1 mm apart
    surface = dense.surface_points(HOME)[dense.on_tool]
    assert tight.mask(surface, HOME).mean() >= 0.9999


def test_mask_equals_the_exact_distance_to_the_samples(self_filter: RobotSelfFilter) -> None:
    """The voxel grid's shortcuts (sure inside, far outside) never change the answer."""
    joints = dict(zip(ARM_JOINTS, (0.4, 0.3, 0.0, -1.9, 0.0, 2.2, 0.785), strict=True))
    surface = self_filter.surface_points(joints)
    rng = np.random.default_rng(1)
    near = surface[rng.integers(len(surface), size=20_000)] + rng.normal(scale=0.015, size=(20_000, 3))
    anywhere = rng.uniform(surface.min(axis=0) - 0.1, surface.max(axis=0) + 0.1, size=(20_000, 3))
    points = np.concatenate([near, anywhere])
    tool = self_filter.on_tool
    assert 0 < tool.sum() < len(tool)  # the hand and fingers, not the whole arm
    expected = (nearest(surface[~tool], points) <= self_filter.margin_m) | (
        nearest(surface[tool], points) <= self_filter.tool_margin_m
    )
    assert 0.2 < expected.mean() < 0.8
    assert np.array_equal(self_filter.mask(points, joints), expected)
    assert self_filter.mask(np.empty((0, 3)), joints).shape == (0,)


def test_sampling_is_deterministic_and_about_spacing_apart(panda: RobotDescription) -> None:
    a, b = RobotSelfFilter(panda, seed=4), RobotSelfFilter(panda, seed=4)
    assert np.array_equal(a.surface_points(HOME), b.surface_points(HOME))
    coarse = RobotSelfFilter(panda, spacing_m=0.016)  # the arm's; the tool's follows its margin
    assert (~coarse.on_tool).sum() == pytest.approx((~a.on_tool).sum() / 4, rel=0.05)
    assert coarse.on_tool.sum() == pytest.approx(a.on_tool.sum(), rel=0.05)
    # every sample has a neighbour about one spacing away
    gaps = cKDTree(a.surface_points(HOME)).query(a.surface_points(HOME), k=2)[0][:, 1]
    assert np.median(gaps) < a.spacing_m


def test_missing_arm_joints_are_named(self_filter: RobotSelfFilter) -> None:
    joints = {name: q for name, q in HOME.items() if name not in ("panda_joint3", "panda_joint7")}
    with pytest.raises(MissingJoints, match=r"panda_joint3', 'panda_joint7") as caught:
        self_filter.mask(np.zeros((1, 3)), joints)
    assert isinstance(caught.value, CarryOnError)
    assert caught.value.missing == ("panda_joint3", "panda_joint7")


def test_a_description_naming_joints_the_urdf_lacks_is_a_config_error(panda: RobotDescription) -> None:
    with pytest.raises(ConfigError, match="panda_joint9"):
        RobotSelfFilter(panda.model_copy(update={"joint_names": [*panda.joint_names[:6], "panda_joint9"]}))


def test_triangle_samples_lie_on_their_triangle() -> None:
    vertices = np.array([[0.0, 0.0, 0.0], [0.1, 0.0, 0.0], [0.0, 0.2, 0.0]])
    points = sample_triangles(vertices, np.array([[0, 1, 2]]), 0.005, np.random.default_rng(0))
    assert len(points) == pytest.approx(0.01 / 0.005**2, abs=1)
    assert np.all(points[:, 2] == 0.0)
    assert np.all(points[:, 0] / 0.1 + points[:, 1] / 0.2 <= 1.0 + 1e-12)
    assert np.all(points[:, :2] >= 0.0)


# -- a URDF of primitives, on a shifted and turned base ---------------------------------------
PRIMITIVES_URDF = """<?xml version="1.0"?>
<robot name="blocks">
  <link name="base"><collision><geometry><box size="0.2 0.1 0.05"/></geometry></collision></link>
  <link name="arm">
    <collision><origin xyz="0 0 0.2"/><geometry><cylinder radius="0.03" length="0.4"/></geometry></collision>
  </link>
  <link name="tip"><collision><geometry><sphere radius="0.05"/></geometry></collision></link>
  <joint name="turn" type="revolute">
    <parent link="base"/><child link="arm"/><origin xyz="0 0 0.025"/><axis xyz="1 0 0"/>
    <limit lower="-3" upper="3" effort="1" velocity="1"/>
  </joint>
  <joint name="spin" type="continuous">
    <parent link="arm"/><child link="tip"/><origin xyz="0 0 0.5"/><axis xyz="0 0 1"/>
  </joint>
</robot>
"""


def test_primitives_and_the_base_pose_are_honoured(tmp_path: Path) -> None:
    urdf = tmp_path / "blocks.urdf"
    urdf.write_text(PRIMITIVES_URDF)
    description = RobotDescription(
        urdf_file=str(urdf),
        joint_names=["turn", "spin"],
        tool_frame="tip",
        tcp_xyz=(0.0, 0.0, 0.0),
        tcp_rpy=(0.0, 0.0, 0.0),
        base_xyz=(1.0, 2.0, 0.5),
        base_rpy=(0.0, 0.0, np.pi / 2),
    )
    blocks = RobotSelfFilter(description, spacing_m=0.005, margin_m=0.01)
    joints = {"turn": np.pi / 2, "spin": 1.0}  # arm laid down along the base's -y, i.e. world +x
    surface = blocks.surface_points(joints)
    # in world: the box turned with the base, the cylinder along x, the sphere at its end
    box = np.abs(np.max(np.abs(surface - [1.0, 2.0, 0.5]) / [0.05, 0.1, 0.025], axis=1) - 1.0) < 1e-9
    radial = np.hypot(surface[:, 1] - 2.0, surface[:, 2] - 0.525)
    along = surface[:, 0]
    side = (np.abs(radial - 0.03) < 1e-9) & (along > 1.0 - 1e-9) & (along < 1.4 + 1e-9)
    caps = (np.minimum(np.abs(along - 1.0), np.abs(along - 1.4)) < 1e-9) & (radial < 0.03 + 1e-9)
    tip = np.array([1.5, 2.0, 0.525])
    sphere = np.abs(np.linalg.norm(surface - tip, axis=1) - 0.05) < 1e-9
    assert np.all(box | side | caps | sphere)
    expected = {"box": 2 * (0.2 * 0.1 + 0.2 * 0.05 + 0.1 * 0.05), "side": 2 * np.pi * 0.03 * 0.4}
    expected |= {"caps": 2 * np.pi * 0.03**2, "sphere": 4 * np.pi * 0.05**2}
    for name, found in {"box": box, "side": side, "caps": caps, "sphere": sphere}.items():
        assert found.sum() == pytest.approx(expected[name] / 0.005**2, rel=0.05), name
    up = np.array([0.0, 0.0, 1.0])
    probes = np.array([tip + 0.055 * up, tip + 0.07 * up, [1.25, 2.0, 0.525 + 0.035], [0.97, 2.0, 0.5]])
    assert blocks.mask(probes, joints).tolist() == [True, False, True, False]


# -- against the simulator's robot segmentation -----------------------------------------------
# name -> (arm joints, each finger's opening in metres, max fraction of non-robot points masked
# per camera). Away from objects nothing else is masked; with the closed gripper 6 cm above the
# table next to the bowl, the bowl's rim lies within the margin of the fingers in the wrist view.
POSES = {
    "home": (HOME_Q, 0.04, {SCENE_CAMERA: 0.001, WRIST_CAMERA: 0.001}),
    "reach_left": ((0.4, 0.3, 0.0, -1.9, 0.0, 2.2, 0.785), 0.04, {SCENE_CAMERA: 0.001, WRIST_CAMERA: 0.001}),
    "low_closed": (
        (-0.099, 0.574, -0.238, -2.066, 0.258, 2.613, 0.262),
        0.0,
        {SCENE_CAMERA: 0.001, WRIST_CAMERA: 0.01},
    ),
}
MIN_ROBOT_MASKED = 0.98


@pytest.fixture(scope="module")
def simulated() -> Iterator[tuple[World, CameraRig]]:
    world = World(load_scene(scene_path(scenes_dir(), "food_serving")), seed=0)
    rig = CameraRig(world.model, world.object_of_body, 256, 256)
    try:
        yield world, rig
    finally:
        rig.close()


@pytest.fixture(scope="module")
def sim_tool_margin_m(config_dir: Path) -> float:
    """The tool margin the simulator's profile runs with (config/nodes/perception_node.yaml)."""
    parameters = read_yaml(config_dir / "nodes" / "perception_node.yaml")["/**"]["ros__parameters"]
    return float(parameters["self_filter_tool_margin_m"])


@pytest.mark.slow
@pytest.mark.parametrize("camera", [SCENE_CAMERA, WRIST_CAMERA])
def test_off_centre_simulated_fingers_are_masked_from_the_joint_states(
    simulated: tuple[World, CameraRig], panda: RobotDescription, sim_tool_margin_m: float, camera: str
) -> None:
    """As after the bench's off-centre grasp of the cube: the left finger pressed 2 mm past the
    centre line, the right one 3.8 cm out. With the finger joints of the simulator's joint states
    the hand is masked whole at the simulator's tight tool margin; the width alone misses it."""
    world, rig = simulated
    world.data.qpos[world.robot.arm_qpos] = POSES["reach_left"][0]
    world.data.qpos[world.robot.finger_qpos] = [-0.002, -0.038]
    mujoco.mj_forward(world.model, world.data)
    joints = world.joint_states()
    fingers = {name: joints[name] for name in panda.gripper_joints}  # the URDF's names, each >= 0 from the centre
    assert sum(fingers.values()) == pytest.approx(world.gripper_width())
    frame = rig.render(world.data, camera, rgb=False)
    points, labels = points_by_label(frame.depth, frame.segmentation, frame.K, frame.world_from_camera)
    robot = labels == next(i for i, name in frame.labels.items() if name == "robot")
    self_filter = RobotSelfFilter(panda, tool_margin_m=sim_tool_margin_m)
    mask = self_filter.mask(points, joints, gripper_width_m=world.gripper_width())
    assert mask[robot].mean() >= 0.99
    assert not mask[~robot].any()
    if camera == WRIST_CAMERA:  # it sees the fingers up close
        arm_only = {name: joints[name] for name in ARM_JOINTS}
        assert self_filter.mask(points, arm_only, gripper_width_m=world.gripper_width())[robot].mean() < 0.95


@pytest.mark.slow
@pytest.mark.parametrize("camera", [SCENE_CAMERA, WRIST_CAMERA])
@pytest.mark.parametrize("pose", list(POSES))
def test_robot_points_of_the_simulated_cameras_are_masked(
    simulated: tuple[World, CameraRig], self_filter: RobotSelfFilter, pose: str, camera: str
) -> None:
    world, rig = simulated
    arm_q, finger_m, max_other = POSES[pose]
    world.data.qpos[world.robot.arm_qpos] = arm_q
    world.data.qpos[world.robot.finger_qpos] = [finger_m, -finger_m]
    mujoco.mj_forward(world.model, world.data)
    # what a robot would report: joint states by name and the measured finger width
    joints = {name: float(world.data.qpos[adr]) for name, adr in zip(SIM_ARM_JOINTS, world.robot.arm_qpos, strict=True)}
    frame = rig.render(world.data, camera, rgb=False)
    points, labels = points_by_label(frame.depth, frame.segmentation, frame.K, frame.world_from_camera)
    robot = labels == next(i for i, name in frame.labels.items() if name == "robot")
    assert robot.sum() > 1000

    start = time.perf_counter()
    mask = self_filter.mask(points, joints, gripper_width_m=world.gripper_width())
    elapsed_ms = 1e3 * (time.perf_counter() - start)

    robot_masked, other_masked = float(mask[robot].mean()), float(mask[~robot].mean())
    print(f"{pose} {camera}: {len(points)} points, {robot.sum()} robot, {robot_masked:.4f} of them masked, "
          f"{other_masked:.5f} of the others masked ({int(mask[~robot].sum())}), {elapsed_ms:.1f} ms")  # fmt: skip
    assert robot_masked >= MIN_ROBOT_MASKED
    assert other_masked <= max_other[camera]
    assert elapsed_ms < 200.0  # generous for a shared test machine; the target is < 15 ms on an idle core
