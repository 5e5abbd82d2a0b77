"""Adapters between a real VLA and the robot: layout parsing (core/layout.py), observation
mapping (core/observation_mapping.py), raw-action conventions and rejection of bad chunks
(core/action_mapping.py), and the rotation helpers behind them."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from carryon_common.core.chunk import Convention
from carryon_common.core.errors import ConfigError
from carryon_policy.core import rotations
from carryon_policy.core.action_mapping import ActionMapper
from carryon_policy.core.config import PolicyConfig
from carryon_policy.core.layout import parse_action_layout, parse_camera_map, parse_state_map
from carryon_policy.core.observation_mapping import ObservationMapper, resize_image
from carryon_policy.core.policy import InvalidAction, MissingObservation, Observation, RobotState

RZ90 = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # 90 degrees about z


def _observation(
    rotation: np.ndarray | None = None, joints: int = 7, width_m: float = 0.04, images: dict | None = None
) -> Observation:
    robot = RobotState(
        ee_position=np.array([0.5, 0.1, 0.3]),
        ee_rotation=np.eye(3) if rotation is None else rotation,
        joint_positions=np.linspace(0.1, 0.7, joints),
        gripper_width_m=width_m,
        frame_id="panda_link0",
    )
    return Observation(observation_id=1, stamp_s=0.0, robot=robot, images=images or {})


def _random_rotations(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        q = rng.normal(size=4)
        out.append(rotations.quat_wxyz_to_matrix(q))
    return out


class PlanarKinematics:
    """Fake FK: the tool sits at (sum(q), 0, 0.3), rotated about z by the first joint."""

    def __init__(self) -> None:
        self.calls: list[np.ndarray] = []

    def forward(self, joint_positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.calls.append(np.array(joint_positions))
        return np.array([float(np.sum(joint_positions)), 0.0, 0.3]), rotations.rotvec_to_matrix(
            np.array([0.0, 0.0, joint_positions[0]])
        )


# --- rotations ---------------------------------------------------------------------------


def test_rotation_conversions_round_trip() -> None:
    for matrix in [np.eye(3), RZ90, rotations.rotvec_to_matrix(np.array([np.pi - 1e-7, 0, 0])), *_random_rotations(20)]:
        np.testing.assert_allclose(rotations.rotvec_to_matrix(rotations.matrix_to_rotvec(matrix)), matrix, atol=1e-6)
        np.testing.assert_allclose(
            rotations.quat_wxyz_to_matrix(rotations.matrix_to_quat_wxyz(matrix)), matrix, atol=1e-9
        )
        np.testing.assert_allclose(
            rotations.euler_xyz_to_matrix(rotations.matrix_to_euler_xyz(matrix)), matrix, atol=1e-9
        )
        np.testing.assert_allclose(rotations.rot6d_to_matrix(rotations.matrix_to_rot6d(matrix)), matrix, atol=1e-9)


def test_rotation_conventions_are_the_documented_ones() -> None:
    np.testing.assert_allclose(rotations.rotvec_to_matrix(np.array([0.0, 0.0, np.pi / 2])), RZ90, atol=1e-12)
    np.testing.assert_allclose(rotations.euler_xyz_to_matrix(np.array([0.0, 0.0, np.pi / 2])), RZ90, atol=1e-12)
    half = np.sqrt(0.5)
    np.testing.assert_allclose(rotations.quat_wxyz_to_matrix(np.array([half, 0.0, 0.0, half])), RZ90, atol=1e-12)
    # extrinsic x-y-z: R = Rz(yaw) Ry(pitch) Rx(roll)
    roll, pitch, yaw = 0.3, -0.2, 1.1
    expected = (
        rotations.rotvec_to_matrix(np.array([0, 0, yaw]))
        @ rotations.rotvec_to_matrix(np.array([0, pitch, 0]))
        @ rotations.rotvec_to_matrix(np.array([roll, 0, 0]))
    )
    np.testing.assert_allclose(rotations.euler_xyz_to_matrix(np.array([roll, pitch, yaw])), expected, atol=1e-12)


def test_degenerate_rotations_are_errors() -> None:
    with pytest.raises(ValueError, match="zero length"):
        rotations.quat_wxyz_to_matrix(np.zeros(4))
    with pytest.raises(ValueError, match="parallel"):
        rotations.rot6d_to_matrix(np.array([1.0, 0, 0, 2.0, 0, 0]))


# --- configuration -----------------------------------------------------------------------


def test_camera_and_state_maps_parse() -> None:
    cams = parse_camera_map(["observation/image = scene", "observation/wrist_image=wrist"])
    assert [(c.policy_key, c.camera) for c in cams] == [
        ("observation/image", "scene"),
        ("observation/wrist_image", "wrist"),
    ]
    states = parse_state_map(["observation/joint_position=joints", "observation/gripper_position=gripper"])
    assert [(s.policy_key, s.parts) for s in states] == [
        ("observation/joint_position", ("joints",)), ("observation/gripper_position", ("gripper",)),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (["observation/image"], "must look like '<policy key>=<value>'"),
        (["a=scene", "a=wrist"], "given more than once"),
    ],
)
def test_bad_camera_maps_say_why(entries: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_camera_map(entries)


def test_unknown_state_part_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown part 'ee_quat'.*valid: ee_pos"):
        parse_state_map(["s=ee_pos+ee_quat"])


@pytest.mark.parametrize(
    ("layout", "convention", "message"),
    [
        (["ee_rotvec", "gripper"], "ee_delta", "needs an 'ee_pos' part"),
        (["ee_pos", "joints"], "ee_absolute", "cannot have a 'joints' part"),
        (["joints", "ee_pos"], "joint_absolute", "cannot have ee_pos"),
        (["ee_pos", "gripper"], "joint_delta", "needs a 'joints' part"),
        (["ee_pos", "ee_rotvec", "ee_quat_wxyz"], "ee_absolute", "more than one rotation part"),
        (["ee_pos", "gripper", "gripper"], "ee_delta", "appears more than once"),
        (["ee_pos", "grip"], "ee_delta", "unknown part 'grip'"),
    ],
)
def test_bad_action_layouts_say_why(layout: list[str], convention: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_action_layout(layout, convention)


def test_skip_may_repeat_in_an_action_layout() -> None:
    assert parse_action_layout(["ee_pos", "skip", "skip", "gripper"], "ee_delta") == (
        "ee_pos",
        "skip",
        "skip",
        "gripper",
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"vla_cameras": ["observation/image"]}, "must look like"),
        ({"vla_state": ["s=ee_pos+elbow"]}, "unknown part 'elbow'"),
        ({"vla_action_layout": ["gripper"]}, "needs an 'ee_pos' part"),
        ({"vla_image_size": [224]}, "vla_image_size must be"),
        ({"vla_gripper_open": 1.0}, "must differ"),
        ({"vla_action_convention": "ee_absolute", "vla_action_frame": "tool"}, "applies to ee_delta and ee_relative"),
        ({"vla_action_convention": "joint_pos"}, "unknown action convention 'joint_pos'"),
        ({"vla_image_resize": "crop"}, "unknown image resize mode 'crop'"),
        ({"remote_uri": "http://gpu-box:8000"}, "must start with ws://"),
    ],
)
def test_policy_config_rejects_inconsistent_vla_settings(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        PolicyConfig.model_validate(overrides)


def test_default_config_is_valid_and_maps_libero_keys() -> None:
    config = PolicyConfig()
    mapper = ObservationMapper.from_config(config)
    assert mapper.robot_cameras == ("scene", "wrist")
    assert [b.policy_key for b in mapper.cameras] == ["observation/image", "observation/wrist_image"]


# --- observations ------------------------------------------------------------------------


def test_resize_with_pad_keeps_the_aspect_ratio() -> None:
    image = np.full((480, 640, 3), 200, dtype=np.uint8)
    out = resize_image(image, 224, 224, "pad")
    assert out.shape == (224, 224, 3) and out.dtype == np.uint8
    rows = np.flatnonzero(out[:, 112, 0] > 0)
    assert (rows[0], rows[-1]) == (28, 195)  # 168 image rows centred, black bars above and below
    assert np.all(out[:, :, 0].max(axis=0) == 200)  # full width used


def test_resize_stretch_fills_the_frame_and_same_size_is_untouched() -> None:
    image = np.full((480, 640, 3), 200, dtype=np.uint8)
    assert np.all(resize_image(image, 224, 224, "stretch") == 200)
    assert resize_image(image, 480, 640, "pad") is image


def test_state_vectors_follow_the_named_parts() -> None:
    states_map = parse_state_map(
        ["a=ee_pos+ee_rotvec+gripper_fingers", "b=ee_quat_xyzw+ee_quat_wxyz", "c=joints+gripper"]
    )
    mapper = ObservationMapper([], states_map, image_size=None, resize_mode="pad", gripper_max_width_m=0.08)
    states = mapper.states(_observation(rotation=RZ90, width_m=0.02))
    half = np.sqrt(0.5)
    np.testing.assert_allclose(states["a"], [0.5, 0.1, 0.3, 0, 0, np.pi / 2, 0.01, -0.01], atol=1e-12)
    np.testing.assert_allclose(states["b"], [0, 0, half, half, half, 0, 0, half], atol=1e-12)
    np.testing.assert_allclose(states["c"], [*np.linspace(0.1, 0.7, 7), 0.75], atol=1e-12)  # 0.02 of 0.08 open


def test_joint_state_without_joints_is_missing() -> None:
    mapper = ObservationMapper(
        [], parse_state_map(["q=joints"]), image_size=None, resize_mode="pad", gripper_max_width_m=0.08
    )
    with pytest.raises(MissingObservation, match="joint positions"):
        mapper.states(_observation(joints=0))


def test_images_are_mapped_resized_and_missing_ones_reported() -> None:
    mapper = ObservationMapper(
        parse_camera_map(["img=scene", "wrist_img=wrist"]),
        [],
        image_size=(96, 96),
        resize_mode="pad",
        gripper_max_width_m=0.08,
    )
    images = {"scene": np.zeros((120, 160, 3), np.uint8), "wrist": np.zeros((96, 96, 3), np.uint8)}
    out = mapper.images(_observation(images=images))
    assert {k: v.shape for k, v in out.items()} == {"img": (96, 96, 3), "wrist_img": (96, 96, 3)}
    with pytest.raises(MissingObservation, match=r"camera 'wrist' \(VLA input 'wrist_img'\).*present: scene"):
        mapper.images(_observation(images={"scene": images["scene"]}))
    with pytest.raises(MissingObservation, match="expected \\(H, W, 3\\) uint8"):
        mapper.images(_observation(images={**images, "scene": np.zeros((120, 160), np.uint8)}))


# --- actions -----------------------------------------------------------------------------


def _mapper(
    convention: str = "ee_delta", layout: tuple[str, ...] = ("ee_pos", "ee_rotvec", "gripper"), **kw: object
) -> ActionMapper:
    return ActionMapper(convention, list(layout), horizon=kw.pop("horizon", 16), **kw)  # type: ignore[arg-type]


def test_base_frame_deltas_pass_through_scaled() -> None:
    raw = np.array([[1.0, 0.0, -1.0, 0.0, 0.0, 1.0, -1.0], [0.5, 0.5, 0.0, 0.2, 0.0, 0.0, 1.0]])
    mapper = _mapper(position_scale=0.05, rotation_scale=0.5, gripper_open=-1.0, gripper_closed=1.0)
    out = mapper.to_output(raw, _observation(), server_infer_s=0.02)
    assert out.convention is Convention.DELTA and out.frame_id == "panda_link0" and out.server_infer_s == 0.02
    np.testing.assert_allclose(out.positions, [[0.05, 0, -0.05], [0.025, 0.025, 0]])
    np.testing.assert_allclose(out.rotations, [[0, 0, 0.5], [0.1, 0, 0]])
    np.testing.assert_allclose(out.gripper, [0.0, 1.0])


def test_tool_frame_deltas_are_rotated_into_the_base_frame() -> None:
    # Tool turned 90 degrees about z: its x axis is the base y axis. Step 1 turns it another 90.
    raw = np.array([[0.01, 0, 0, 0, 0, np.pi / 2], [0.01, 0, 0, 0, 0, 0]])
    out = _mapper(layout=("ee_pos", "ee_rotvec"), frame="tool").to_output(raw, _observation(rotation=RZ90))
    np.testing.assert_allclose(out.positions, [[0, 0.01, 0], [-0.01, 0, 0]], atol=1e-12)
    np.testing.assert_allclose(out.rotations, [[0, 0, np.pi / 2], [0, 0, 0]], atol=1e-12)


def test_tool_frame_deltas_compose_to_the_same_poses_as_relative_ones() -> None:
    rng = np.random.default_rng(5)
    steps = rng.normal(scale=0.05, size=(6, 6))
    r0 = _random_rotations(1, seed=9)[0]
    delta = _mapper(layout=("ee_pos", "ee_rotvec"), frame="tool").to_output(steps, _observation(rotation=r0))
    # integrate the DELTA output (R_k = exp(w_k) R_{k-1}) and the tool-frame steps directly
    p, r = np.array([0.5, 0.1, 0.3]), r0
    p_body, r_body = p.copy(), r0.copy()
    for k in range(6):
        p, r = p + delta.positions[k], rotations.rotvec_to_matrix(delta.rotations[k]) @ r
        p_body, r_body = p_body + r_body @ steps[k, :3], r_body @ rotations.rotvec_to_matrix(steps[k, 3:])
        np.testing.assert_allclose(p, p_body, atol=1e-12)
        np.testing.assert_allclose(r, r_body, atol=1e-9)


@pytest.mark.parametrize(
    ("frame", "position", "rotation"), [("base", [0.51, 0.1, 0.3], RZ90), ("tool", [0.5, 0.11, 0.3], RZ90)]
)
def test_relative_poses_become_absolute_targets(frame: str, position: list[float], rotation: np.ndarray) -> None:
    raw = np.array([[0.01, 0, 0, 0, 0, 0]])
    out = _mapper("ee_relative", ("ee_pos", "ee_rotvec"), frame=frame).to_output(raw, _observation(rotation=RZ90))
    assert out.convention is Convention.ABSOLUTE
    np.testing.assert_allclose(out.positions[0], position, atol=1e-12)
    np.testing.assert_allclose(rotations.rotvec_to_matrix(out.rotations[0]), rotation, atol=1e-12)


def test_absolute_poses_read_any_rotation_format() -> None:
    half = np.sqrt(0.5)
    raw = np.array([[0.4, 0.0, 0.2, 0.0, 0.0, half, half, 1.0]])  # quaternion x, y, z, w
    out = _mapper("ee_absolute", ("ee_pos", "ee_quat_xyzw", "gripper")).to_output(raw, _observation())
    np.testing.assert_allclose(out.positions, [[0.4, 0.0, 0.2]])
    np.testing.assert_allclose(out.rotations, [[0, 0, np.pi / 2]], atol=1e-12)
    euler = np.array([[0.4, 0.0, 0.2, 0.0, 0.0, 0.5]])
    out = _mapper("ee_absolute", ("ee_pos", "ee_euler_xyz"), rotation_scale=np.pi).to_output(euler, _observation())
    np.testing.assert_allclose(out.rotations, [[0, 0, np.pi / 2]], atol=1e-12)


def test_absolute_positions_without_rotation_hold_the_orientation_and_gripper() -> None:
    out = _mapper("ee_absolute", ("ee_pos",), gripper_max_width_m=0.08).to_output(
        np.array([[0.4, 0, 0.2]]), _observation(rotation=RZ90, width_m=0.02)
    )
    np.testing.assert_allclose(out.rotations, [[0, 0, np.pi / 2]], atol=1e-12)
    np.testing.assert_allclose(out.gripper, [0.75])


def test_joint_targets_go_through_forward_kinematics() -> None:
    fk = PlanarKinematics()
    raw = np.zeros((2, 8))
    raw[:, 0] = [0.1, 0.2]
    out = _mapper("joint_absolute", ("joints", "gripper"), kinematics=fk).to_output(raw, _observation())
    assert out.convention is Convention.ABSOLUTE
    np.testing.assert_allclose(out.positions, [[0.1, 0, 0.3], [0.2, 0, 0.3]])
    np.testing.assert_allclose(out.rotations, [[0, 0, 0.1], [0, 0, 0.2]], atol=1e-12)


def test_joint_deltas_accumulate_from_the_observed_joints() -> None:
    fk = PlanarKinematics()
    raw = np.ones((3, 7))  # velocity 1 rad/s on every joint, 0.05 s per step
    _mapper("joint_delta", ("joints",), kinematics=fk, joint_scale=0.05).to_output(raw, _observation())
    q0 = np.linspace(0.1, 0.7, 7)
    for k, q in enumerate(fk.calls):
        np.testing.assert_allclose(q, q0 + 0.05 * (k + 1))


def test_joint_conventions_without_kinematics_are_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="needs forward kinematics"):
        _mapper("joint_absolute", ("joints", "gripper"))


def test_chunks_are_truncated_to_the_horizon_and_extra_values_ignored() -> None:
    raw = np.zeros((50, 32))  # openpi-style padding beyond the layout
    raw[:, 20:] = np.nan
    out = _mapper(horizon=10).to_output(raw, _observation())
    assert len(out) == 10


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (np.array([[0, 0, np.nan, 0, 0, 0, 0]]), r"NaN or infinity \(step 0, value 2\)"),
        (np.array([[0] * 7, [0, 0, 0, np.inf, 0, 0, 0]]), r"NaN or infinity \(step 1, value 3\)"),
        (np.zeros(7), r"shape \(7,\)"),
        (np.zeros((0, 7)), "at least one step"),
        (np.zeros((4, 5)), "5 values per step; layout ee_pos\\+ee_rotvec\\+gripper needs 7"),
        (np.array([["a"] * 7]), "expected numbers"),
        ([[0.0] * 7], "expected an array"),
        (np.array([[0, 0, 0, 0, 0, 0, 1.5]]), "gripper command 1.5 at step 0 is outside \\[0, 1\\]"),
        (np.array([[0, 0, 0, 0, 0, 0, -0.2]]), "gripper command -0.2"),
    ],
)
def test_bad_chunks_are_rejected_with_the_reason(raw: object, message: str) -> None:
    with pytest.raises(InvalidAction, match=message):
        _mapper().to_output(raw, _observation())


def test_gripper_overshoot_within_the_margin_is_clipped() -> None:
    out = _mapper(gripper_open=-1.0, gripper_closed=1.0).to_output(
        np.array([[0, 0, 0, 0, 0, 0, 1.1], [0, 0, 0, 0, 0, 0, -1.1]]), _observation()
    )
    np.testing.assert_allclose(out.gripper, [1.0, 0.0])


def test_values_beyond_max_abs_drop_the_chunk() -> None:
    raw = np.array([[0.5, 0, 0, 0, 0, 0, 0], [1.5, 0, 0, 0, 0, 0, 0]])
    with pytest.raises(InvalidAction, match=r"1.5 \(step 1, value 0\) exceeds vla_action_max_abs 1"):
        _mapper(max_abs=1.0).to_output(raw, _observation())
    assert len(_mapper(max_abs=2.0).to_output(raw, _observation())) == 2


def test_a_zero_quaternion_is_an_invalid_action() -> None:
    with pytest.raises(InvalidAction, match="zero length"):
        _mapper("ee_absolute", ("ee_pos", "ee_quat_wxyz")).to_output(np.zeros((1, 7)), _observation())


def test_non_finite_forward_kinematics_is_an_invalid_action() -> None:
    class Broken:
        def forward(self, joint_positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return np.full(3, np.nan), np.eye(3)

    with pytest.raises(InvalidAction, match="forward kinematics"):
        _mapper("joint_absolute", ("joints",), kinematics=Broken()).to_output(np.zeros((1, 7)), _observation())


def test_a_joint_space_vla_gets_the_robot_files_kinematics(config_dir, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """openpi_remote with joint targets needs no code: robot_file's Pinocchio model maps the
    targets to tool poses, and they land where the simulated arm's tool is for those joints."""
    mujoco = pytest.importorskip("mujoco")
    from carryon_policy.core.backends import kinematics_for, make_policy
    from carryon_sim.core.scene import load_scene, scene_path, scenes_dir
    from carryon_sim.core.world import World

    monkeypatch.setenv("CARRYON_CONFIG_DIR", str(config_dir))
    config = PolicyConfig(backend="openpi_remote", remote_uri="ws://127.0.0.1:9",
                          vla_action_convention="joint_absolute", vla_action_layout=["joints", "gripper"])  # fmt: skip
    kinematics = kinematics_for(config)
    assert kinematics is not None and kinematics.joint_names[0] == "panda_joint1"
    make_policy(config)  # no "needs forward kinematics" error
    assert kinematics_for(config.model_copy(update={"vla_action_convention": "ee_delta"})) is None
    assert kinematics_for(config.model_copy(update={"backend": "sim_scripted"})) is None

    world = World(load_scene(scene_path(scenes_dir(str(config_dir / "scenes")), "food_serving")), seed=0)
    targets = np.array([[0.1, -0.5, 0.0, -2.2, 0.0, 1.8, 0.7], [0.3, -0.2, 0.1, -2.0, 0.1, 1.9, 0.5]])
    raw = np.hstack([targets, np.zeros((2, 1))])
    out = _mapper("joint_absolute", ("joints", "gripper"), kinematics=kinematics).to_output(raw, _observation())
    for q, position in zip(targets, out.positions, strict=True):
        world.data.qpos[world.robot.arm_qpos] = q
        mujoco.mj_kinematics(world.model, world.data)
        assert np.abs(world.ee_pose()[0] - position).max() < 1e-5
