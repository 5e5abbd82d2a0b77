"""Parameters of the backends that run a real VLA (remote server, local checkpoint) and of
the adapter that maps their actions and cameras to the robot. Mixed into PolicyConfig.

Prefixes: `remote_*` only the openpi_remote backend reads; `lerobot_*` only lerobot_local;
`vla_*` both (the adapter: the layout in core/layout.py, what the VLA reads in
core/observation_mapping.py, how its actions map to end-effector commands in
core/action_mapping.py). Defaults follow openpi's LIBERO example (keys observation/image,
observation/wrist_image, observation/state, prompt; 7 values per step: position delta,
rotation-vector delta, gripper), with unit scales; docs/policy.md shows settings for
other checkpoints.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from carryon_common.core.config import NodeConfig, one_of
from carryon_policy.core.layout import (
    ACTION_CONVENTIONS,
    ACTION_FRAMES,
    IMAGE_RESIZE_MODES,
    parse_action_layout,
    parse_camera_map,
    parse_state_map,
)


class RemoteBackendConfig(NodeConfig):
    remote_uri: str = Field(
        "", description="URI of an openpi policy server (openpi_remote), e.g. ws://gpu-box:8000 ('' = unused)."
    )
    remote_connect_timeout_s: float = Field(
        5.0, gt=0.0, description="Longest wait to connect to the remote server and receive its metadata, seconds."
    )
    remote_timeout_s: float = Field(
        10.0,
        gt=0.0,
        description="Longest wait for the reply to one inference, seconds; on timeout the connection is closed "
        "and the next inference reconnects.",
    )
    remote_api_key_env: str = Field(
        "",
        description="Environment variable holding an API key, sent as 'Authorization: Api-Key <key>' ('' = no key).",
    )
    remote_prompt_key: str = Field(
        "prompt", description="Key of the instruction text in each request to the remote server ('' = not sent)."
    )
    lerobot_checkpoint_dir: str = Field(
        "",
        description="lerobot_local: folder of a LeRobot policy saved with save_pretrained (config.json, "
        "model.safetensors, policy_preprocessor.json, policy_postprocessor.json).",
    )
    lerobot_device: str = Field("cpu", description="lerobot_local: torch device, e.g. 'cpu', 'cuda', 'cuda:1'.")
    vla_cameras: list[str] = Field(
        default_factory=lambda: ["observation/image=scene", "observation/wrist_image=wrist"],
        description="Images the VLA reads, as '<policy key>=<robot camera>' (robot cameras from 'cameras').",
    )
    vla_image_size: list[int] = Field(
        default_factory=lambda: [224, 224],
        description="Height and width, pixels, images are resized to before they are sent ([] = as captured; "
        "lerobot_local uses the checkpoint's input sizes).",
    )
    vla_image_resize: Annotated[str, one_of("image resize mode", IMAGE_RESIZE_MODES)] = Field(
        "pad", description="'pad' keeps the aspect ratio and pads with black (openpi's resize_with_pad); 'stretch'."
    )
    vla_state: list[str] = Field(
        default_factory=lambda: ["observation/state=ee_pos+ee_rotvec+gripper_fingers"],
        description="State vectors the VLA reads, as '<policy key>=<part>+<part>...'; parts: ee_pos, ee_rotvec, "
        "ee_euler_xyz, ee_quat_wxyz, ee_quat_xyzw, ee_rot6d, joints, gripper (0 open..1 closed), gripper_width "
        "(m), gripper_fingers (+-width/2, m).",
    )
    vla_action_convention: Annotated[str, one_of("action convention", ACTION_CONVENTIONS)] = Field(
        "ee_delta",
        description="How the VLA's raw actions read: 'ee_delta' (tool moves per step), 'ee_relative' (poses "
        "relative to the observed tool pose), 'ee_absolute' (target poses), 'joint_delta', 'joint_absolute' "
        "(joint targets; need forward kinematics).",
    )
    vla_action_layout: list[str] = Field(
        default_factory=lambda: ["ee_pos", "ee_rotvec", "gripper"],
        description="Parts of one raw action step, in order: ee_pos, one of ee_rotvec/ee_euler_xyz/ee_quat_wxyz/"
        "ee_quat_xyzw/ee_rot6d, joints, gripper, skip (one ignored value); values after them are ignored.",
    )
    vla_action_frame: Annotated[str, one_of("action frame", ACTION_FRAMES)] = Field(
        "base", description="Frame of ee_delta / ee_relative offsets: 'base' (robot base) or 'tool' (tool frame)."
    )
    vla_action_position_scale: float = Field(
        1.0, gt=0.0, description="Metres per raw position unit (e.g. a controller's output range)."
    )
    vla_action_rotation_scale: float = Field(
        1.0, gt=0.0, description="Radians per raw rotation unit (ee_rotvec, ee_euler_xyz only)."
    )
    vla_action_joint_scale: float = Field(
        1.0, gt=0.0, description="Radians per raw joint unit (a joint velocity policy: the control period, s)."
    )
    vla_action_max_abs: float = Field(
        0.0,
        ge=0.0,
        description="Largest magnitude any raw action value may have; a chunk with a larger one is dropped "
        "(0 = no limit).",
    )
    vla_gripper_open: float = Field(0.0, description="Raw gripper action meaning fully open (LIBERO: -1, DROID: 0).")
    vla_gripper_closed: float = Field(1.0, description="Raw gripper action meaning fully closed (LIBERO: 1, DROID: 1).")
    vla_gripper_max_width_m: float = Field(
        0.08, gt=0.0, description="Finger opening of the fully open gripper, metres (normalises the gripper state)."
    )

    @model_validator(mode="after")
    def _vla_mapping_is_consistent(self) -> RemoteBackendConfig:
        parse_camera_map(self.vla_cameras)
        parse_state_map(self.vla_state)
        parse_action_layout(self.vla_action_layout, self.vla_action_convention)
        if self.vla_image_size and (len(self.vla_image_size) != 2 or min(self.vla_image_size) < 1):
            raise ValueError(f"vla_image_size must be [height, width] in pixels or [], got {self.vla_image_size}")
        if self.vla_gripper_open == self.vla_gripper_closed:
            raise ValueError("vla_gripper_open and vla_gripper_closed must differ")
        if self.vla_action_frame == "tool" and self.vla_action_convention not in ("ee_delta", "ee_relative"):
            raise ValueError("vla_action_frame 'tool' applies to ee_delta and ee_relative actions only")
        if self.remote_uri and not self.remote_uri.startswith(("ws://", "wss://")):
            raise ValueError(f"remote_uri must start with ws:// or wss://, got {self.remote_uri!r}")
        return self
