"""The robot model's kinematics without ROS: Pinocchio against the simulator's MuJoCo model,
IK, joint order and clear errors for bad models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from carryon_common.core.errors import ConfigError
from carryon_robot.core.kinematics import ArmKinematics, RobotDescription, default_urdf, load_robot, transform

HOME = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785])


@pytest.fixture(scope="module")
def panda(config_dir: Path) -> RobotDescription:
    return load_robot(str(config_dir / "robot" / "panda.yaml"))


@pytest.fixture(scope="module")
def kinematics(panda: RobotDescription) -> ArmKinematics:
    return panda.kinematics()


def test_forward_kinematics_agree_with_the_simulated_arm(kinematics: ArmKinematics) -> None:
    mujoco = pytest.importorskip("mujoco")
    from carryon_sim.core.scene import load_scene, scene_path, scenes_dir
    from carryon_sim.core.world import World

    world = World(load_scene(scene_path(scenes_dir(str(Path(__file__).parents[2] / "config" / "scenes")),
                                        "food_serving")), seed=0)  # fmt: skip
    rng = np.random.default_rng(3)
    for _ in range(20):
        q = rng.uniform(kinematics.lower, kinematics.upper) * 0.7
        world.data.qpos[world.robot.arm_qpos] = q
        mujoco.mj_kinematics(world.model, world.data)
        sim_position, sim_rotation = world.ee_pose()
        position, rotation = kinematics.forward(q)
        assert np.abs(position - sim_position).max() < 1e-6
        assert np.linalg.norm(Rotation.from_matrix(rotation.T @ sim_rotation).as_rotvec()) < 2e-3  # < 0.1 degree


def test_inverse_kinematics_reaches_targets_near_the_seed(kinematics: ArmKinematics) -> None:
    start_position, start_rotation = kinematics.forward(HOME)
    rng = np.random.default_rng(0)
    for _ in range(20):
        goal = start_position + rng.uniform(-0.12, 0.12, 3)
        turn = Rotation.from_rotvec(rng.uniform(-0.3, 0.3, 3)).as_matrix()
        solution = kinematics.inverse(HOME, goal, turn @ start_rotation)
        position, rotation = kinematics.forward(solution.q)
        assert solution.position_error_m < 1e-3
        assert np.abs(position - goal).max() < 1e-3
        assert np.all(solution.q >= kinematics.lower - 1e-9) and np.all(solution.q <= kinematics.upper + 1e-9)
        assert np.linalg.norm(Rotation.from_matrix(rotation.T @ turn @ start_rotation).as_rotvec()) < 1e-2


def test_joint_order_follows_the_configuration(kinematics: ArmKinematics) -> None:
    names = [f"panda_joint{i}" for i in (7, 6, 5, 4, 3, 2, 1)]
    reordered = ArmKinematics(default_urdf(), names, tool_frame="panda_hand", tcp=transform([0, 0, 0.0965],
                              [0, 0, -np.pi / 2]), base=transform([0, 0, 0.42], [0, 0, 0]))  # fmt: skip
    assert np.allclose(reordered.forward(HOME[::-1])[0], kinematics.forward(HOME)[0])


def test_bad_models_are_reported_clearly(panda: RobotDescription, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        panda.model_copy(update={"urdf_file": str(tmp_path / "nope.urdf")}).kinematics()
    with pytest.raises(ConfigError, match=r"joints \['elbow'\] are not in"):
        panda.model_copy(update={"joint_names": ["elbow"]}).kinematics()
    with pytest.raises(ConfigError, match="tool frame 'flange'"):
        panda.model_copy(update={"tool_frame": "flange"}).kinematics()
    broken = tmp_path / "broken.urdf"
    broken.write_text("<robot name='x'><link name='a'/><joint name='j' type='revolute'></robot>")
    with pytest.raises(ConfigError, match="cannot read URDF"):
        panda.model_copy(update={"urdf_file": str(broken)}).kinematics()
    bad = tmp_path / "robot.yaml"
    bad.write_text("joint_names: []\ntool_frame: panda_hand\ntcp_xyz: [0, 0]\n")
    with pytest.raises(ConfigError, match=r"robot.yaml: joint_names: .*\n.*tcp_xyz"):
        load_robot(str(bad))
