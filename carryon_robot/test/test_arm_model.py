"""The arm's collision model: spheres that cover each link's collision geometry, placed right."""

from __future__ import annotations

import numpy as np
import pytest

from carryon_common.core.errors import ConfigError
from carryon_robot.core import arm_model
from carryon_robot.core.arm_model import ArmModel, fit_spheres, geometry_samples
from carryon_robot.core.kinematics import default_urdf, load_robot, transform

READY = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])


@pytest.fixture(scope="module")
def model() -> ArmModel:
    return load_robot("").arm_model()


def test_every_point_of_every_links_collision_mesh_lies_inside_its_spheres(model: ArmModel) -> None:
    _pin_model, geometry = arm_model._load_with_geometry(default_urdf())
    spheres_of = {link.link: link for link in model.links}
    for obj in geometry.geometryObjects:
        link = spheres_of[_pin_model.frames[obj.parentFrame].name]
        vertices = np.asarray(obj.geometry.vertices(), dtype=np.float64).reshape(-1, 3)
        dense = geometry_samples(obj.geometry, spacing_m=0.003)  # 3x denser than the fit's samples
        for points in (vertices, dense):
            local = (obj.placement.homogeneous @ np.column_stack([points, np.ones(len(points))]).T).T[:, :3]
            outside = np.linalg.norm(local[:, None, :] - link.spheres[None, :, :3], axis=2) - link.spheres[None, :, 3]
            worst = float(outside.min(axis=1).max())
            assert worst <= 0.0, f"{link.link}: a point of its mesh lies {worst * 1000:.1f} mm outside its spheres"


def test_few_spheres_that_reach_little_beyond_the_link(model: ArmModel) -> None:
    from scipy.spatial import ConvexHull

    for link in model.links:
        assert len(link.spheres) <= 16, f"{link.link}: {len(link.spheres)} spheres"
        hull = ConvexHull(link.surface).equations
        directions = arm_model._fibonacci_sphere(64)
        rims = (link.spheres[:, None, :3] + link.spheres[:, None, 3:] * directions[None]).reshape(-1, 3)
        beyond = float((rims @ hull[:, :3].T + hull[:, 3]).max(axis=1).max())
        assert beyond <= 0.035, f"{link.link}: a sphere reaches {beyond * 1000:.0f} mm beyond the link's hull"
    assert len(model.checked_spheres[0]) <= 80


def test_the_checked_links_are_the_arms_moving_links_less_the_hand(model: ArmModel) -> None:
    checked = [model.links[i].link for i in model.checked]
    assert checked == [f"panda_link{i}" for i in range(1, 8)]  # link 0 is mounted; hand and fingers are the hand's
    assert {model.links[i].link for i in model.moving} >= {"panda_hand", "panda_leftfinger", "panda_rightfinger"}


def test_the_vectorised_kinematics_agrees_with_pinocchio(model: ArmModel) -> None:
    kinematics = load_robot("").kinematics()
    rng = np.random.default_rng(3)
    q = rng.uniform(kinematics.lower, kinematics.upper, size=(25, 7))
    positions, rotations = model.tool_poses(q, 0.08)
    for i in range(len(q)):
        position, rotation = kinematics.forward(q[i])
        assert np.allclose(positions[i], position, atol=1e-9) and np.allclose(rotations[i], rotation, atol=1e-9)


def test_fit_spheres_covers_a_box_and_a_flat_plate() -> None:
    axes = [np.linspace(-0.1, 0.1, 21), np.linspace(-0.03, 0.03, 7), np.linspace(-0.02, 0.02, 5)]
    box = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)
    plate = box[np.isclose(box[:, 2], 0.0)]
    for points in (box, plate):
        spheres = fit_spheres(points)
        assert (np.linalg.norm(points[:, None] - spheres[None, :, :3], axis=2) <= spheres[None, :, 3]).any(axis=1).all()


def test_a_urdf_without_collision_geometry_or_with_unknown_hand_links_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    robot = load_robot("")
    text = default_urdf().read_text()
    bare = tmp_path / "bare.urdf"
    import re

    bare.write_text(re.sub(r"<collision>.*?</collision>", "", text, flags=re.S))
    base, tcp = transform(robot.base_xyz, robot.base_rpy), transform(robot.tcp_xyz, robot.tcp_rpy)
    with pytest.raises(ConfigError, match="no collision geometry"):
        ArmModel(bare, robot.joint_names, base, tool_frame=robot.tool_frame, tcp=tcp)
    with pytest.raises(ConfigError, match="hand_links"):
        ArmModel(default_urdf(), robot.joint_names, base, tool_frame=robot.tool_frame, tcp=tcp, hand_links=["gripper"])
    with pytest.raises(ConfigError, match="not in"):
        ArmModel(default_urdf(), ["elbow"], base, tool_frame=robot.tool_frame, tcp=tcp)


def test_the_compiled_ik_lands_where_the_drivers_ik_does(model: ArmModel) -> None:
    """The shield predicts the drivers' joints with the compiled IK: from the same seed, for
    targets a step away, both reach the target and agree on the joints."""
    from scipy.spatial.transform import Rotation

    kinematics = load_robot("").kinematics()
    rng = np.random.default_rng(7)
    agreed = 0
    for _ in range(200):
        seed = np.clip(READY + rng.normal(0.0, 0.4, 7), kinematics.lower, kinematics.upper)
        position, rotation = kinematics.forward(seed)
        turn = Rotation.from_rotvec(rng.normal(0.0, 0.05, 3)).as_matrix()
        target = (position + rng.normal(0.0, 0.01, 3), turn @ rotation)
        drivers = kinematics.inverse(seed, *target)
        if drivers.position_error_m > 1e-4 or drivers.rotation_error_rad > 1e-3:
            continue  # at a joint limit: the drivers refuse such a step anyway
        compiled = model.inverse(seed, *target, 0.08)
        assert compiled.position_error_m < 1e-4 and compiled.rotation_error_rad < 1e-3
        assert np.abs(compiled.q - drivers.q).max() < 0.01
        agreed += 1
    assert agreed > 150
    path, position_errors, _, _ = model.inverse_path(READY, *(np.array(v)[None] for v in kinematics.forward(READY)))
    assert np.allclose(path[0], READY, atol=1e-3) and position_errors[0] < 1e-4
