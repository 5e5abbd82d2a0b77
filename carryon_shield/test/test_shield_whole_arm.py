"""The whole-arm shield: links of the arm, the motion between steps, IK failures.

The arm is the Panda of config/robot/panda.yaml (its URDF's collision meshes, `ArmModel`),
starting at its ready configuration; obstacles are placed from where the arm's own links
go, so the cases follow the model rather than hand-picked coordinates.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from carryon_common.core.chunk import Chunk, ChunkSource, Convention
from carryon_robot.core.kinematics import load_robot
from carryon_shield.core.arm import ArmCheck
from carryon_shield.core.filter import GeometricShield, RetreatParams, Snapshot, Thresholds
from carryon_shield.core.gate import Decision
from carryon_shield.core.geometry import HAND_BOXES, GripperGeometry
from carryon_shield.core.response import ResponseModel
from carryon_shield.core.types import ObstacleSet, RobotState

READY = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])


@pytest.fixture(scope="module")
def arm() -> ArmCheck:
    robot = load_robot("")
    return ArmCheck(robot.arm_model(), robot.kinematics())


def column(x: float, y: float, z_low: float, z_high: float, name: str = "shelf") -> ObstacleSet:
    """A thin vertical post of points (a shelf's upright)."""
    z = np.arange(z_low, z_high, 0.01)
    points = np.column_stack([np.full(len(z), x), np.full(len(z), y), z])
    return ObstacleSet(points, np.ones(len(points), dtype=np.int32), ("unknown", name), 0.0, "world")


def chunk_of(positions: np.ndarray, rotations: np.ndarray) -> Chunk:
    n = len(positions)
    rotvecs = Rotation.from_matrix(rotations).as_rotvec()
    return Chunk(7, "s1", ChunkSource.POLICY, Convention.ABSOLUTE, "world", 0.1, 3, 0.0, positions, rotvecs,
                 np.zeros(n))  # fmt: skip


def shields(arm: ArmCheck, obstacles: ObstacleSet, q: np.ndarray) -> tuple[GeometricShield, GeometricShield]:
    """(hand only, whole arm), deciding from the arm at joints `q` among `obstacles`."""
    position, rotation = arm.kinematics.forward(q)
    state = RobotState(position, rotation, np.zeros(3), 0.08, 0.0, 0.0, joints=q)
    snapshot = Snapshot(obstacles, state, GripperGeometry.build(0.08), False)
    make = lambda check: GeometricShield(  # noqa: E731
        lambda _now: snapshot, ResponseModel.identity(), Thresholds(), RetreatParams(), arm=check
    )
    return make(None), make(arm)


def elbow_case(arm: ArmCheck) -> tuple[ObstacleSet, Chunk, int]:
    """The tool slides 32 cm sideways; a post stands just ahead of the forearm (link 5, the
    elbow's link that moves most here) where it is at step 5, far from the hand's path and
    clear of the arm where it starts. Returns the obstacles, the chunk and that step."""
    start_p, start_r = arm.kinematics.forward(READY)
    positions = start_p + np.arange(1, 9)[:, None] * np.array([0.0, 0.04, 0.0])
    rotations = np.repeat(start_r[None], len(positions), axis=0)
    q, unreachable, _ = arm.configurations(READY, positions, rotations)
    assert unreachable < 0
    before = arm.model.link_spheres_world(READY, 0.08)["panda_link5"]
    after = arm.model.link_spheres_world(q[5], 0.08)["panda_link5"]
    moved = after[:, :3] - before[:, :3]
    lead = int(np.argmax(np.linalg.norm(moved, axis=1)))
    ahead = after[lead, :3] + moved[lead] / np.linalg.norm(moved[lead]) * after[lead, 3] * 0.5
    post = column(ahead[0], ahead[1], ahead[2] - 0.05, ahead[2] + 0.05)
    hand_path = np.linalg.norm(post.points[:, None, :] - positions[None], axis=2).min()
    assert hand_path > 0.15, "the post must be far from every tool position"
    start = np.vstack(list(arm.model.link_spheres_world(READY, 0.08).values()))
    start_clear = np.linalg.norm(post.points[:, None, :] - start[None, :, :3], axis=2) - start[None, :, 3]
    assert start_clear.min() > 0.05, "the post must be clear of the arm where it starts"
    return post, chunk_of(positions, rotations), 5


def test_a_chunk_whose_tool_path_is_clear_but_whose_elbow_passes_through_an_obstacle_is_not_released(
    arm: ArmCheck,
) -> None:
    post, chunk, elbow_step = elbow_case(arm)
    hand_only, whole_arm = shields(arm, post, READY)
    assert hand_only.decide(chunk, hand_only.perceive(0.0)).decision == Decision.RELEASED_ALL  # the hand misses it

    decision = whole_arm.decide(chunk, whole_arm.perceive(0.0))
    assert decision.decision in (Decision.RELEASED_PREFIX, Decision.RETREAT)
    assert decision.released_steps <= elbow_step
    assert "panda_link" in decision.reason and "shelf" in decision.reason
    # rviz: the arm's spheres where the link blocked, one marker each; unused ids deleted
    from builtin_interfaces.msg import Time
    from visualization_msgs.msg import Marker

    from carryon_shield.convert import decision_markers

    assert decision.arm_spheres is not None and len(decision.arm_spheres) == len(arm.model.checked_spheres[0])
    shown = [m for m in decision_markers(decision, Time()).markers if m.ns == "shield_arm"]
    assert sum(m.action == Marker.ADD for m in shown) == len(decision.arm_spheres)
    released = decision.released
    if released is not None and decision.decision == Decision.RELEASED_PREFIX:  # what it releases is clear
        _, whole = shields(arm, post, READY)
        again = whole.decide(released, whole.perceive(0.0))
        assert again.decision == Decision.RELEASED_ALL


def test_the_same_chunk_away_from_the_post_is_released_whole(arm: ArmCheck) -> None:
    post, chunk, _ = elbow_case(arm)
    far = ObstacleSet(post.points + np.array([0.0, 0.0, 1.5]), post.label_index, post.names, 0.0, "world")
    _, whole_arm = shields(arm, far, READY)
    assert whole_arm.decide(chunk, whole_arm.perceive(0.0)).decision == Decision.RELEASED_ALL


def test_a_one_step_wrist_turn_that_sweeps_the_palm_through_an_object_is_not_released(arm: ArmCheck) -> None:
    start_p, start_r = arm.kinematics.forward(READY)
    turned = start_r @ Rotation.from_euler("z", 170, degrees=True).as_matrix()
    # An object beside the palm: clear of it at both end poses (the palm is long along the
    # finger axis, tool x, and thin across, tool y), inside what the palm sweeps on the way.
    palm_lo, palm_hi = np.array(HAND_BOXES[0][0]), np.array(HAND_BOXES[0][1])
    beside = np.array([0.0, palm_hi[1] + 0.045, 0.5 * (palm_lo[2] + palm_hi[2])])
    points = start_p + (start_r @ (beside + np.array([[0.0, 0.0, dz] for dz in (-0.01, 0.0, 0.01)])).T).T
    obstacles = ObstacleSet(points, np.ones(3, dtype=np.int32), ("unknown", "bottle"), 0.0, "world")
    chunk = chunk_of(start_p[None], turned[None])
    hand_only, whole_arm = shields(arm, obstacles, READY)
    assert hand_only.decide(chunk, hand_only.perceive(0.0)).decision == Decision.RELEASED_ALL  # both ends clear

    decision = whole_arm.decide(chunk, whole_arm.perceive(0.0))
    assert decision.decision != Decision.RELEASED_ALL
    assert decision.released_steps == 0 or decision.decision == Decision.RETREAT
    assert "on the way" in decision.reason and "bottle" in decision.reason


def test_an_unreachable_step_fails_closed(arm: ArmCheck) -> None:
    start_p, start_r = arm.kinematics.forward(READY)
    positions = np.array(
        [start_p + np.array([0.0, 0.0, -0.01]), start_p + np.array([2.0, 0.0, 0.0])]
    )  # 2 m away: out of reach
    chunk = chunk_of(positions, np.repeat(start_r[None], 2, axis=0))
    _, whole_arm = shields(arm, column(5.0, 5.0, 0.0, 0.1), READY)
    decision = whole_arm.decide(chunk, whole_arm.perceive(0.0))
    assert decision.decision == Decision.RELEASED_PREFIX and decision.released_steps == 1
    assert "cannot reach" in decision.reason


def test_without_measured_joints_the_whole_arm_shield_releases_nothing(arm: ArmCheck) -> None:
    start_p, start_r = arm.kinematics.forward(READY)
    state = RobotState(start_p, start_r, np.zeros(3), 0.08, 0.0, 0.0, joints=None)
    snapshot = Snapshot(column(5.0, 5.0, 0.0, 0.1), state, GripperGeometry.build(0.08), False)
    shield = GeometricShield(lambda _now: snapshot, ResponseModel.identity(), Thresholds(), RetreatParams(), arm=arm)
    chunk = chunk_of((start_p + np.array([0.0, 0.0, -0.01]))[None], start_r[None])
    decision = shield.decide(chunk, snapshot)
    assert decision.decision == Decision.REJECTED_NO_PERCEPTION and decision.released is None
    assert "joint states" in decision.reason


def test_the_sweep_is_dense_enough_that_no_sphere_moves_more_than_its_step(arm: ArmCheck) -> None:
    start_p, start_r = arm.kinematics.forward(READY)
    positions = start_p + np.outer(np.arange(1, 5), [0.04, -0.03, 0.02])
    sweep = arm.sweep(READY, positions, np.repeat(start_r[None], 4, axis=0), 0.08)
    centres = arm.model.sphere_centres(np.vstack([READY, sweep.q]), 0.08, moving=True)
    moved = np.linalg.norm(np.diff(centres, axis=0), axis=2).max()
    assert moved <= arm.sweep_m + 1e-9
    assert list(np.unique(sweep.step)) == [0, 1, 2, 3]


def test_exempt_objects_are_obstacles_for_the_arms_links_and_a_carried_target_is_not(arm: ArmCheck) -> None:
    """Permitted contacts are the hand's: the task's target beside the forearm's path blocks
    it; the same points while the hand holds the target are the carried object's (attached)."""
    post, chunk, elbow_step = elbow_case(arm)
    as_target = ObstacleSet(np.zeros((0, 3)), np.zeros(0, dtype=np.int32), ("unknown", "carrot"), 0.0, "world",
                            target_points=post.points, target_label=1)  # fmt: skip
    position, rotation = arm.kinematics.forward(READY)
    state = RobotState(position, rotation, np.zeros(3), 0.03, 1.0, 0.0, joints=READY)
    for holding, blocked in ((False, True), (True, False)):
        snapshot = Snapshot(as_target, state, GripperGeometry.build(0.03), holding)
        shield = GeometricShield(lambda _now, s=snapshot: s, ResponseModel.identity(), Thresholds(), RetreatParams(),
                                 arm=arm)  # fmt: skip
        decision = shield.decide(chunk, snapshot)
        assert (decision.decision != Decision.RELEASED_ALL) == blocked, decision.reason
        if blocked:
            assert decision.released_steps <= elbow_step and "carrot" in decision.reason


def test_a_step_that_folds_the_hand_into_the_base_is_not_released(arm: ArmCheck) -> None:
    """Self-collision: the joints swing the hand down into the arm's own column."""
    folded = READY.copy()
    folded[1], folded[3], folded[5] = 1.5, -3.0, 3.7
    assert arm.model.self_collisions(folded[None], 0.08)[0] >= 0
    path = np.linspace(READY, folded, 30)[1:]  # steps within the joint limit per step
    positions, rotations = arm.model.tool_poses(path, 0.08)
    _, whole_arm = shields(arm, column(5.0, 5.0, 0.0, 0.1), READY)
    decision = whole_arm.decide(chunk_of(positions, rotations), whole_arm.perceive(0.0))
    assert decision.decision != Decision.RELEASED_ALL
    assert "self-collision" in decision.reason or "cannot reach" in decision.reason


def test_a_step_whose_joints_jump_beyond_the_drivers_limit_is_not_released(arm: ArmCheck) -> None:
    """The drivers refuse a joint step beyond the shared limit (MotionLimits): the shield
    stops the chunk before it instead of releasing what the driver will refuse."""
    from carryon_common.core.driver import LIMITS

    bent = READY.copy()
    bent[0] += 3 * LIMITS.joint_step_limit_rad(0.1)  # joint 1 swings the whole arm round
    path = np.array([READY + 0.01, bent])
    positions, rotations = arm.model.tool_poses(path, 0.08)
    _, whole_arm = shields(arm, column(5.0, 5.0, 0.0, 0.1), READY)
    decision = whole_arm.decide(chunk_of(positions, rotations), whole_arm.perceive(0.0))
    assert decision.decision == Decision.RELEASED_PREFIX and decision.released_steps == 1
    assert "joints would move" in decision.reason
