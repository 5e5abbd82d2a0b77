"""Forward and inverse kinematics of a joint tree, compiled (numba), for per-step checks.

The same damped least-squares IK as `kinematics.ArmKinematics.inverse` (the drivers'):
from a seed, step `dq = J^T (J J^T + damping I)^-1 e` towards the tool target, clipped to
the joint limits, until the tool is within 0.1 mm and 1 mrad or 50 iterations have run.
The error and the Jacobian are taken in `world` here rather than in the tool frame, which
changes the path of the iterations, not where they end: a test holds the two to the same
joints. Compiled, one solve costs microseconds instead of a tenth of a millisecond, which is
what lets the shield solve every step of a 50-step chunk on the chunk's path.

The tree is given as arrays (from `arm_model.ArmModel`): for each joint j = 1..J its parent,
its placement in the parent's frame at zero (4, 4), its unit axis and whether it turns
(revolute) or slides (prismatic); index 0 is the base, placed at `base` in `world`.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@numba.njit(cache=True, nogil=True)
def _compose(a: FloatArray, b: FloatArray, out: FloatArray) -> None:
    """out = a @ b for rigid transforms (4, 4), written out (small matrices: no BLAS call)."""
    for r in range(3):
        for c in range(4):
            out[r, c] = a[r, 0] * b[0, c] + a[r, 1] * b[1, c] + a[r, 2] * b[2, c] + (a[r, 3] if c == 3 else 0.0)
    out[3, 0] = out[3, 1] = out[3, 2] = 0.0
    out[3, 3] = 1.0


@numba.njit(cache=True, nogil=True)
def chain_fk(  # noqa: PLR0917 - numba compiles positional arguments only
    values: FloatArray,
    parent: IntArray,
    placement: FloatArray,
    axis: FloatArray,
    revolute: npt.NDArray[np.bool_],
    base: FloatArray,
) -> FloatArray:
    """Every joint's frame (J + 1, 4, 4) in `world` for joint values (J,) (index j - 1 for joint j)."""
    count = parent.shape[0]
    poses = np.empty((count + 1, 4, 4))
    poses[0] = base
    motion = np.zeros((4, 4))
    placed = np.empty((4, 4))
    for j in range(1, count + 1):
        x, y, z = axis[j - 1, 0], axis[j - 1, 1], axis[j - 1, 2]
        v = values[j - 1]
        motion[:] = 0.0
        motion[3, 3] = 1.0
        if revolute[j - 1]:
            s, c = math.sin(v), math.cos(v)
            t = 1.0 - c
            motion[0, 0], motion[0, 1], motion[0, 2] = t * x * x + c, t * x * y - s * z, t * x * z + s * y
            motion[1, 0], motion[1, 1], motion[1, 2] = t * x * y + s * z, t * y * y + c, t * y * z - s * x
            motion[2, 0], motion[2, 1], motion[2, 2] = t * x * z - s * y, t * y * z + s * x, t * z * z + c
        else:
            motion[0, 0] = motion[1, 1] = motion[2, 2] = 1.0
            motion[0, 3], motion[1, 3], motion[2, 3] = v * x, v * y, v * z
        _compose(poses[parent[j - 1]], placement[j - 1], placed)
        _compose(placed, motion, poses[j])
    return poses


@numba.njit(cache=True, nogil=True)
def _log3(r: FloatArray) -> FloatArray:
    """The rotation vector (3,) of a rotation matrix."""
    cos = min(1.0, max(-1.0, 0.5 * (r[0, 0] + r[1, 1] + r[2, 2] - 1.0)))
    theta = math.acos(cos)
    w = np.array([r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1]])
    if theta < 1e-6:
        return 0.5 * w
    if math.pi - theta > 1e-4:
        return theta / (2.0 * math.sin(theta)) * w
    # near a half turn (R ~ 2 u u^T - I): the axis from the largest diagonal entry's column
    diag = np.array([r[0, 0], r[1, 1], r[2, 2]])
    k = int(np.argmax(diag))
    axis = np.empty(3)
    axis[k] = math.sqrt(max(1e-12, 0.5 * (diag[k] + 1.0)))
    for i in range(3):
        if i != k:
            axis[i] = (r[i, k] + r[k, i]) / (4.0 * axis[k])
    axis /= np.linalg.norm(axis)
    if np.dot(axis, w) < 0.0:
        axis = -axis
    return theta * axis


@numba.njit(cache=True, nogil=True)
def chain_ik(  # noqa: PLR0917 - numba compiles positional arguments only
    q_seed: FloatArray,
    columns: IntArray,
    fixed: FloatArray,
    parent: IntArray,
    placement: FloatArray,
    axis: FloatArray,
    revolute: npt.NDArray[np.bool_],
    base: FloatArray,
    tool_joint: int,
    tool_in_joint: FloatArray,
    target: FloatArray,
    lower: FloatArray,
    upper: FloatArray,
    damping: float,
    max_iterations: int,
    tolerance_m: float,
    tolerance_rad: float,
) -> tuple[FloatArray, float, float, int]:
    """Joints (n,) for the commanded joints (pinocchio ids `columns`, others at `fixed`) that
    put the tool at `target` (4, 4, world); with the position and rotation error left and the
    iterations run."""
    n = columns.shape[0]
    q = np.minimum(np.maximum(q_seed.copy(), lower), upper)
    values = fixed.copy()
    jac = np.zeros((6, n))
    error = np.zeros(6)
    tool = np.empty((4, 4))
    turn = np.empty((3, 3))
    world_axis = np.empty(3)
    # joints the tool hangs from (the others do not move it)
    moves_tool = np.zeros(parent.shape[0] + 1, dtype=np.bool_)
    j = tool_joint
    while j > 0:
        moves_tool[j] = True
        j = parent[j - 1]
    iterations = 0
    position_error = rotation_error = math.inf
    for iterations in range(1, max_iterations + 2):
        for k in range(n):
            values[columns[k] - 1] = q[k]
        poses = chain_fk(values, parent, placement, axis, revolute, base)
        _compose(poses[tool_joint], tool_in_joint, tool)
        for a in range(3):
            error[a] = target[a, 3] - tool[a, 3]
            for b in range(3):  # target rotation times the tool's transposed
                turn[a, b] = target[a, 0] * tool[b, 0] + target[a, 1] * tool[b, 1] + target[a, 2] * tool[b, 2]
        error[3:] = _log3(turn)
        position_error = math.sqrt(error[0] ** 2 + error[1] ** 2 + error[2] ** 2)
        rotation_error = math.sqrt(error[3] ** 2 + error[4] ** 2 + error[5] ** 2)
        if (position_error < tolerance_m and rotation_error < tolerance_rad) or iterations > max_iterations:
            break
        for k in range(n):
            joint = columns[k]
            jac[:, k] = 0.0
            if not moves_tool[joint]:
                continue
            for a in range(3):
                world_axis[a] = (
                    poses[joint, a, 0] * axis[joint - 1, 0]
                    + poses[joint, a, 1] * axis[joint - 1, 1]
                    + poses[joint, a, 2] * axis[joint - 1, 2]
                )
            if revolute[joint - 1]:
                lever = tool[:3, 3] - poses[joint, :3, 3]
                jac[0, k] = world_axis[1] * lever[2] - world_axis[2] * lever[1]
                jac[1, k] = world_axis[2] * lever[0] - world_axis[0] * lever[2]
                jac[2, k] = world_axis[0] * lever[1] - world_axis[1] * lever[0]
                jac[3:, k] = world_axis
            else:
                jac[:3, k] = world_axis
        step = jac.T @ np.linalg.solve(jac @ jac.T + damping * np.eye(6), error)
        q = np.minimum(np.maximum(q + step, lower), upper)
    return q, position_error, rotation_error, min(iterations, max_iterations)


@numba.njit(cache=True, nogil=True)
def chain_ik_path(  # noqa: PLR0917 - numba compiles positional arguments only
    q_start: FloatArray,
    columns: IntArray,
    fixed: FloatArray,
    parent: IntArray,
    placement: FloatArray,
    axis: FloatArray,
    revolute: npt.NDArray[np.bool_],
    base: FloatArray,
    tool_joint: int,
    tool_in_joint: FloatArray,
    targets: FloatArray,
    lower: FloatArray,
    upper: FloatArray,
    damping: float,
    max_iterations: int,
    tolerance_m: float,
    tolerance_rad: float,
) -> tuple[FloatArray, FloatArray, FloatArray, IntArray]:
    """`chain_ik` for a sequence of targets (m, 4, 4), each seeded from the previous solution
    (the first from `q_start`): joints (m, n), position errors (m,), rotation errors (m,),
    iterations (m,)."""
    m = targets.shape[0]
    out = np.empty((m, columns.shape[0]))
    position_errors = np.empty(m)
    rotation_errors = np.empty(m)
    iterations = np.empty(m, dtype=np.int64)
    q = q_start.copy()
    for i in range(m):
        q, position_errors[i], rotation_errors[i], iterations[i] = chain_ik(
            q,
            columns,
            fixed,
            parent,
            placement,
            axis,
            revolute,
            base,
            tool_joint,
            tool_in_joint,
            targets[i],
            lower,
            upper,
            damping,
            max_iterations,
            tolerance_m,
            tolerance_rad,
        )
        out[i] = q
    return out, position_errors, rotation_errors, iterations


@numba.njit(cache=True, nogil=True)
def chain_fk_batch(  # noqa: PLR0917 - numba compiles positional arguments only
    values: FloatArray,
    parent: IntArray,
    placement: FloatArray,
    axis: FloatArray,
    revolute: npt.NDArray[np.bool_],
    base: FloatArray,
) -> FloatArray:
    """`chain_fk` for m sets of joint values (m, J): (m, J + 1, 4, 4)."""
    out = np.empty((values.shape[0], parent.shape[0] + 1, 4, 4))
    for i in range(values.shape[0]):
        out[i] = chain_fk(values[i], parent, placement, axis, revolute, base)
    return out


@numba.njit(cache=True, nogil=True)
def place_points(poses: FloatArray, joints: IntArray, local: FloatArray) -> FloatArray:
    """Points (S, 3) fixed in their joints' frames, placed for m poses (m, J + 1, 4, 4): (m, S, 3)."""
    m, count = poses.shape[0], joints.shape[0]
    out = np.empty((m, count, 3))
    for i in range(m):
        for s in range(count):
            t = poses[i, joints[s]]
            for a in range(3):
                out[i, s, a] = t[a, 0] * local[s, 0] + t[a, 1] * local[s, 1] + t[a, 2] * local[s, 2] + t[a, 3]
    return out


@numba.njit(cache=True, nogil=True)
def first_overlap(
    centres: FloatArray, radii: FloatArray, first: IntArray, second: IntArray, pair: IntArray
) -> IntArray:
    """For m configurations of spheres (m, S, 3): the `pair` label of the first sphere pair
    (first[k], second[k]) that overlaps, -1 where none does."""
    out = np.full(centres.shape[0], -1, dtype=np.int64)
    for i in range(centres.shape[0]):
        for k in range(first.shape[0]):
            a, b = first[k], second[k]
            dx = centres[i, a, 0] - centres[i, b, 0]
            dy = centres[i, a, 1] - centres[i, b, 1]
            dz = centres[i, a, 2] - centres[i, b, 2]
            reach = radii[a] + radii[b]
            if dx * dx + dy * dy + dz * dz < reach * reach:
                out[i] = pair[k]
                break
    return out
