"""Checks a backend's output before it becomes a chunk: anything a robot must not
execute raises InvalidAction with the reason (the node drops the chunk and reports it)."""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation

from carryon_common.core.chunk import Convention
from carryon_policy.core.policy import FloatArray, InvalidAction, PolicyOutput


def check_output(out: PolicyOutput, current_position: FloatArray, *, max_step_m: float, max_step_rad: float) -> None:
    """Shapes, finiteness, gripper range, and the size of every step: between consecutive
    targets (ABSOLUTE, the first from `current_position`, metres, same frame) or of each
    offset (DELTA). Rotation steps are checked the same way, radians."""
    n = len(out)
    if n == 0:
        raise InvalidAction("the backend returned no steps")
    if out.positions.shape != (n, 3) or out.rotations.shape != (n, 3) or out.gripper.shape != (n,):
        raise InvalidAction(
            f"inconsistent shapes: positions {out.positions.shape}, rotations {out.rotations.shape}, "
            f"gripper {out.gripper.shape}"
        )
    for name, values in (("positions", out.positions), ("rotations", out.rotations), ("gripper", out.gripper)):
        bad = ~np.isfinite(values)
        if np.any(bad):
            first = int(np.argwhere(bad)[0][0])
            raise InvalidAction(f"{name} contain NaN or infinity (first at step {first})")
    if np.any((out.gripper < 0.0) | (out.gripper > 1.0)):
        raise InvalidAction(f"gripper commands outside [0, 1]: {out.gripper.min():.3g}..{out.gripper.max():.3g}")
    if out.convention == Convention.ABSOLUTE:
        moves = np.diff(np.vstack([current_position[None, :], out.positions]), axis=0)
        # Angle between consecutive orientations (rotation vectors near pi flip sign, so
        # they are compared as rotations, not as vectors).
        rotations = Rotation.from_rotvec(out.rotations)
        turn = np.atleast_1d((rotations[:-1].inv() * rotations[1:]).magnitude()) if n > 1 else np.zeros(0)
    else:
        moves, turn = out.positions, np.linalg.norm(out.rotations, axis=1)
    step = np.linalg.norm(moves, axis=1)
    if np.any(step > max_step_m):
        i = int(np.argmax(step))
        raise InvalidAction(f"step {i} moves {step[i] * 1000:.0f} mm (max {max_step_m * 1000:.0f} mm per step)")
    if np.any(turn > max_step_rad):
        i = int(np.argmax(turn))
        raise InvalidAction(f"step {i} turns {turn[i]:.2f} rad (max {max_step_rad:.2f} rad per step)")
