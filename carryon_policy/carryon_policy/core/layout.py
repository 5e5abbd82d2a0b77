"""The layout a user writes for a VLA (`RemoteBackendConfig`'s `vla_*` fields), parsed
and checked: which robot camera feeds which policy image key, which named parts make up
each state vector, and the parts of one raw action step in order.

State and action layouts name their parts in order; part sizes are fixed except `joints`,
which has as many values as the robot reports joint positions:

| part | size | meaning |
|---|---|---|
| ee_pos | 3 | tool-centre-point position, metres |
| ee_rotvec | 3 | orientation as a rotation vector, radians |
| ee_euler_xyz | 3 | extrinsic roll, pitch, yaw, radians |
| ee_quat_wxyz / ee_quat_xyzw | 4 | orientation quaternion |
| ee_rot6d | 6 | first two columns of the rotation matrix |
| joints | n | arm joint positions, radians |
| gripper | 1 | state: closedness, 0 open .. 1 closed; action: raw command (see vla_gripper_*) |
| gripper_width | 1 | state only: finger opening, metres |
| gripper_fingers | 2 | state only: finger positions +width/2, -width/2, metres (LIBERO's gripper qpos) |
| skip | 1 | action only: a value the adapter ignores |

core/observation_mapping.py and core/action_mapping.py apply a parsed layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Raw action conventions a VLA may use (vla_action_convention).
ACTION_CONVENTIONS = ("ee_delta", "ee_relative", "ee_absolute", "joint_delta", "joint_absolute")
IMAGE_RESIZE_MODES = ("pad", "stretch")
ACTION_FRAMES = ("base", "tool")

ROTATION_PARTS = {"ee_rotvec": 3, "ee_euler_xyz": 3, "ee_quat_wxyz": 4, "ee_quat_xyzw": 4, "ee_rot6d": 6}
# Part sizes; None = one value per arm joint.
STATE_PARTS: dict[str, int | None] = {
    "ee_pos": 3,
    **ROTATION_PARTS,
    "joints": None,
    "gripper": 1,
    "gripper_width": 1,
    "gripper_fingers": 2,
}
ACTION_PARTS: dict[str, int | None] = {"ee_pos": 3, **ROTATION_PARTS, "joints": None, "gripper": 1, "skip": 1}


@dataclass(frozen=True)
class CameraBinding:
    """One image the VLA reads: `policy_key` in its request <- robot camera `camera`."""

    policy_key: str
    camera: str


@dataclass(frozen=True)
class StateBinding:
    """One state vector the VLA reads: `policy_key` <- concatenation of `parts`."""

    policy_key: str
    parts: tuple[str, ...]


def _split_binding(entry: str, what: str) -> tuple[str, str]:
    key, sep, value = entry.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not key or not value:
        raise ValueError(f"{what} entry {entry!r} must look like '<policy key>=<value>'")
    return key, value


def parse_camera_map(entries: Sequence[str]) -> tuple[CameraBinding, ...]:
    """'<policy key>=<robot camera>' entries -> bindings. Raises ValueError on a bad entry."""
    bindings = tuple(CameraBinding(*_split_binding(e, "vla_cameras")) for e in entries)
    _no_duplicate_keys([b.policy_key for b in bindings], "vla_cameras")
    return bindings


def parse_state_map(entries: Sequence[str]) -> tuple[StateBinding, ...]:
    """'<policy key>=<part>+<part>...' entries -> bindings. Raises ValueError on a bad entry."""
    bindings = []
    for entry in entries:
        key, value = _split_binding(entry, "vla_state")
        parts = tuple(p.strip() for p in value.split("+"))
        for part in parts:
            if part not in STATE_PARTS:
                raise ValueError(f"vla_state: unknown part {part!r} in {entry!r}; valid: {', '.join(STATE_PARTS)}")
        bindings.append(StateBinding(key, parts))
    _no_duplicate_keys([b.policy_key for b in bindings], "vla_state")
    return tuple(bindings)


def _no_duplicate_keys(keys: list[str], what: str) -> None:
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ValueError(f"{what}: policy key(s) {', '.join(duplicates)} given more than once")


def parse_action_layout(parts: Sequence[str], convention: str) -> tuple[str, ...]:
    """Check an action layout against its convention. Raises ValueError with the reason."""
    for part in parts:
        if part not in ACTION_PARTS:
            raise ValueError(f"vla_action_layout: unknown part {part!r}; valid: {', '.join(ACTION_PARTS)}")
    for part in set(parts) - {"skip"}:
        if parts.count(part) > 1:
            raise ValueError(f"vla_action_layout: part {part!r} appears more than once")
    rotation_parts = [p for p in parts if p in ROTATION_PARTS]
    if len(rotation_parts) > 1:
        raise ValueError(f"vla_action_layout: more than one rotation part ({', '.join(rotation_parts)})")
    if convention.startswith("ee_"):
        if "ee_pos" not in parts:
            raise ValueError(f"vla_action_layout: convention {convention!r} needs an 'ee_pos' part")
        if "joints" in parts:
            raise ValueError(f"vla_action_layout: convention {convention!r} cannot have a 'joints' part")
    else:
        if "joints" not in parts:
            raise ValueError(f"vla_action_layout: convention {convention!r} needs a 'joints' part")
        extra = [p for p in parts if p.startswith("ee_")]
        if extra:
            raise ValueError(f"vla_action_layout: convention {convention!r} cannot have {', '.join(extra)}")
    return tuple(parts)
