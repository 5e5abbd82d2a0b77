"""Differential inverse kinematics of the arm on the MuJoCo model (damped least squares).

Solves on a scratch copy of the state, so it never disturbs the simulation. Targets are
the tool centre point's position (metres) and rotation matrix in the `world` frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np
import numpy.typing as npt

from carryon_sim.core.world import RobotIndex


@dataclass(frozen=True)
class IkResult:
    q: npt.NDArray[np.float64]  # arm joint positions, radians
    position_error_m: float
    rotation_error_rad: float
    iterations: int


class ArmIk:
    """IK for the 7 arm joints; `damping` regularises near singularities (unitless)."""

    def __init__(self, model: mujoco.MjModel, robot: RobotIndex, damping: float = 1e-4) -> None:
        self.model = model
        self.robot = robot
        self.damping = damping
        self._scratch = mujoco.MjData(model)
        self._jp = np.zeros((3, model.nv))
        self._jr = np.zeros((3, model.nv))
        lo, hi = model.jnt_range[[model.dof_jntid[d] for d in robot.arm_dof]].T
        self._lo, self._hi = lo, hi

    def solve(
        self,
        q_start: npt.NDArray[np.float64],
        target_pos: npt.NDArray[np.float64],
        target_rot: npt.NDArray[np.float64],
        *,
        max_iterations: int = 20,
        tolerance_m: float = 1e-4,
        tolerance_rad: float = 1e-3,
    ) -> IkResult:
        """Joint positions that put the tool at the target, starting from `q_start`."""
        data = self._scratch
        q = np.clip(np.asarray(q_start, dtype=np.float64), self._lo, self._hi)
        err = np.zeros(6)
        quat = np.zeros(4)
        site = self.robot.ee_site
        iterations = 0
        for iterations in range(1, max_iterations + 1):  # noqa: B007 - the count is reported
            data.qpos[self.robot.arm_qpos] = q
            mujoco.mj_kinematics(self.model, data)
            mujoco.mj_comPos(self.model, data)
            err[:3] = target_pos - data.site_xpos[site]
            delta = target_rot @ data.site_xmat[site].reshape(3, 3).T
            mujoco.mju_mat2Quat(quat, delta.ravel())
            mujoco.mju_quat2Vel(err[3:], quat, 1.0)
            if np.linalg.norm(err[:3]) < tolerance_m and np.linalg.norm(err[3:]) < tolerance_rad:
                break
            mujoco.mj_jacSite(self.model, data, self._jp, self._jr, site)
            jac = np.vstack([self._jp[:, self.robot.arm_dof], self._jr[:, self.robot.arm_dof]])
            dq = jac.T @ np.linalg.solve(jac @ jac.T + self.damping * np.eye(6), err)
            q = np.clip(q + dq, self._lo, self._hi)
        return IkResult(q, float(np.linalg.norm(err[:3])), float(np.linalg.norm(err[3:])), iterations)
