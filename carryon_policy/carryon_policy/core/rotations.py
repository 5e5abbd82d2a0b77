"""Rotation conversions the VLA adapters need, on scipy's `Rotation`.

Conventions: rotation matrices are (3, 3) and act on column vectors; rotation vectors are
axis * angle in radians; quaternions are stated per function (w, x, y, z) or (x, y, z, w);
Euler angles "xyz" are extrinsic roll, pitch, yaw about the fixed x, y, z axes
(R = Rz(yaw) @ Ry(pitch) @ Rx(roll)); the 6D representation is the first two columns of
the matrix (Zhou et al., "On the continuity of rotation representations").
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy.spatial.transform import Rotation

FloatArray = npt.NDArray[np.float64]

_SMALL = 1e-9


def _f64(values: object) -> FloatArray:
    array: FloatArray = np.asarray(values, dtype=np.float64)
    return array


def rotvec_to_matrix(rotvec: FloatArray) -> FloatArray:
    """(3,) rotation vector, radians -> (3, 3) rotation matrix."""
    return _f64(Rotation.from_rotvec(_f64(rotvec)).as_matrix())


def matrix_to_rotvec(matrix: FloatArray) -> FloatArray:
    """(3, 3) rotation matrix -> (3,) rotation vector, radians, angle in [0, pi]."""
    return _f64(Rotation.from_matrix(_f64(matrix)).as_rotvec())


def matrix_to_quat_wxyz(matrix: FloatArray) -> FloatArray:
    """(3, 3) rotation matrix -> (4,) unit quaternion w, x, y, z with w >= 0."""
    return _f64(Rotation.from_matrix(_f64(matrix)).as_quat(canonical=True, scalar_first=True))


def quat_wxyz_to_matrix(quat: FloatArray) -> FloatArray:
    """(4,) quaternion w, x, y, z (normalised here; zero norm raises ValueError) -> (3, 3)."""
    q = _f64(quat)
    if float(np.linalg.norm(q)) < _SMALL:
        raise ValueError("quaternion has zero length")
    return _f64(Rotation.from_quat(q, scalar_first=True).as_matrix())


def quat_wxyz_to_rotvec(quat: FloatArray) -> FloatArray:
    """(4,) quaternion w, x, y, z -> (3,) rotation vector, radians, angle in [0, pi]."""
    return matrix_to_rotvec(quat_wxyz_to_matrix(quat))


def euler_xyz_to_matrix(euler: FloatArray) -> FloatArray:
    """(3,) extrinsic roll, pitch, yaw, radians -> (3, 3) rotation matrix."""
    return _f64(Rotation.from_euler("xyz", _f64(euler)).as_matrix())


def matrix_to_euler_xyz(matrix: FloatArray) -> FloatArray:
    """(3, 3) rotation matrix -> (3,) extrinsic roll, pitch, yaw, radians (inverse of
    euler_xyz_to_matrix; at gimbal lock scipy puts the shared angle in yaw)."""
    return _f64(Rotation.from_matrix(_f64(matrix)).as_euler("xyz"))


def rot6d_to_matrix(rot6d: FloatArray) -> FloatArray:
    """(6,) first two matrix columns (a1, a2) -> (3, 3) rotation matrix (Gram-Schmidt)."""
    v = np.asarray(rot6d, dtype=np.float64)
    a1, a2 = v[:3], v[3:]
    n1 = float(np.linalg.norm(a1))
    if n1 < _SMALL:
        raise ValueError("6D rotation has a zero first column")
    b1 = a1 / n1
    u2 = a2 - np.dot(b1, a2) * b1
    n2 = float(np.linalg.norm(u2))
    if n2 < _SMALL:
        raise ValueError("6D rotation has parallel columns")
    b2 = u2 / n2
    return np.stack([b1, b2, np.cross(b1, b2)], axis=1)


def matrix_to_rot6d(matrix: FloatArray) -> FloatArray:
    """(3, 3) rotation matrix -> (6,) first two columns, column by column."""
    m = np.asarray(matrix, dtype=np.float64)
    return np.concatenate([m[:, 0], m[:, 1]])
