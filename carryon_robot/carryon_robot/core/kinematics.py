"""Kinematics of a real arm from its URDF, with Pinocchio.

Poses are those of the tool centre point (TCP) in CarryOn's `world` frame: the URDF's
base sits at `base_xyz` / `base_rpy` in `world`, and the TCP at `tcp_xyz` / `tcp_rpy` in
the URDF's `tool_frame`. The defaults describe the Franka Panda of the simulator (base on
the table top at z = 0.42 m; TCP between the fingertips, 96.5 mm beyond `panda_hand`, x
along the finger opening), so chunks mean the same on the simulated and the real arm.
Joints the arm does not command (the fingers) are locked at zero.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pinocchio as pin
from pydantic import BaseModel, ConfigDict, Field
from scipy.spatial.transform import Rotation

from carryon_common.core.config import load_yaml_model, under_config_dir
from carryon_common.core.errors import ConfigError

if TYPE_CHECKING:
    from carryon_robot.core.arm_model import ArmModel

FloatArray = npt.NDArray[np.float64]
# The Panda URDF shipped in the robosuite wheel (installed for its assets, see requirements/assets.txt).
PANDA_URDF = "models/assets/bullet_data/panda_description/urdf/panda_arm_hand.urdf"


def default_urdf() -> Path:
    """The Panda URDF from the robosuite wheel's assets."""
    spec = importlib.util.find_spec("robosuite")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "no URDF given and the Panda model is not installed: set urdf_file in the robot file "
            "(robot/panda.yaml) to your robot's URDF, or `pip install --no-deps -r requirements/assets.txt`"
        )
    return Path(next(iter(spec.submodule_search_locations))) / PANDA_URDF


def transform(xyz: Sequence[float], rpy: Sequence[float]) -> pin.SE3:
    """SE3 from a translation (metres) and roll-pitch-yaw (radians, fixed axes x-y-z as in URDF)."""
    return pin.SE3(Rotation.from_euler("xyz", list(rpy)).as_matrix(), np.asarray(xyz, dtype=np.float64))


@dataclass(frozen=True)
class IkSolution:
    q: FloatArray  # commanded joints, radians, in `ArmKinematics.joint_names` order
    position_error_m: float
    rotation_error_rad: float
    iterations: int


class ArmKinematics:
    """Forward and inverse kinematics of the commanded joints of an arm."""

    def __init__(
        self,
        urdf: Path,
        joint_names: Sequence[str],
        *,
        tool_frame: str,
        tcp: pin.SE3,
        base: pin.SE3,
        damping: float = 1e-4,
    ) -> None:
        if not urdf.is_file():
            raise ConfigError(f"URDF {urdf} does not exist")
        try:
            full = pin.buildModelFromUrdf(str(urdf))
        except (RuntimeError, ValueError) as exc:
            raise ConfigError(f"cannot read URDF {urdf}: {exc}") from exc
        known = [full.names[i] for i in range(1, full.njoints)]
        missing = [name for name in joint_names if name not in known]
        if missing:
            raise ConfigError(f"joints {missing} are not in {urdf.name}; its joints: {known}")
        if not full.existFrame(tool_frame):
            raise ConfigError(f"tool frame {tool_frame!r} is not in {urdf.name}")
        locked = [full.getJointId(name) for name in known if name not in joint_names]
        self.model = pin.buildReducedModel(full, locked, pin.neutral(full)) if locked else full
        if self.model.nq != len(joint_names):
            raise ConfigError(f"joints {list(joint_names)} must each have one position variable")
        self.data = self.model.createData()
        # reduced models keep the URDF's joint order; map it to the configured order
        order = [self.model.names[i] for i in range(1, self.model.njoints)]
        self._to_model = np.array([list(joint_names).index(name) for name in order])
        self.joint_names = tuple(joint_names)
        self.lower = self._from_model(self.model.lowerPositionLimit)
        self.upper = self._from_model(self.model.upperPositionLimit)
        self.frame = self.model.getFrameId(tool_frame)
        self.tcp, self.base = tcp, base
        self.damping = damping

    def _to_model_q(self, q: FloatArray) -> FloatArray:
        out: FloatArray = np.asarray(q, dtype=np.float64)[self._to_model]
        return out

    def _from_model(self, q_model: FloatArray) -> FloatArray:
        q = np.empty(len(self.joint_names))
        q[self._to_model] = q_model
        return q

    def _tcp_in_base(self, q_model: FloatArray) -> pin.SE3:
        pin.framesForwardKinematics(self.model, self.data, q_model)
        return self.data.oMf[self.frame] * self.tcp

    def forward(self, q: FloatArray) -> tuple[FloatArray, FloatArray]:
        """TCP position (metres) and rotation matrix in `world` for joints `q`."""
        pose = self.base * self._tcp_in_base(self._to_model_q(q))
        return pose.translation.copy(), pose.rotation.copy()

    def _in_base(self, position: FloatArray, rotation: FloatArray) -> pin.SE3:
        return self.base.inverse() * pin.SE3(np.asarray(rotation, dtype=np.float64), np.asarray(position))

    def to_base(self, position: FloatArray, rotation: FloatArray) -> tuple[FloatArray, FloatArray]:
        """A `world` pose in the URDF base frame (the frame most controllers take targets in)."""
        pose = self._in_base(position, rotation)
        return pose.translation.copy(), pose.rotation.copy()

    def tool_frame_in_base(self, position: FloatArray, rotation: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Where `tool_frame` must be, in the URDF base frame, for the TCP to be at the `world` pose
        (the goal a planner such as MoveIt takes for the tool frame link)."""
        pose = self._in_base(position, rotation) * self.tcp.inverse()
        return pose.translation.copy(), pose.rotation.copy()

    def inverse(
        self,
        q_seed: FloatArray,
        position: FloatArray,
        rotation: FloatArray,
        *,
        max_iterations: int = 50,
        tolerance_m: float = 1e-4,
        tolerance_rad: float = 1e-3,
    ) -> IkSolution:
        """Joints that put the TCP at the `world` pose, by damped least squares from `q_seed`."""
        goal = self._in_base(position, rotation)
        q = np.clip(self._to_model_q(q_seed), self.model.lowerPositionLimit, self.model.upperPositionLimit)
        error = np.zeros(6)
        iterations = 0
        for iterations in range(1, max_iterations + 1):  # noqa: B007 - the count is reported
            current = self._tcp_in_base(q)
            # error in the local TCP frame, as a twist from the current pose to the goal
            error = pin.log6(current.actInv(goal)).vector
            if np.linalg.norm(error[:3]) < tolerance_m and np.linalg.norm(error[3:]) < tolerance_rad:
                break
            pin.computeJointJacobians(self.model, self.data, q)
            jacobian = self.tcp.toActionMatrixInverse() @ pin.getFrameJacobian(
                self.model, self.data, self.frame, pin.ReferenceFrame.LOCAL
            )
            jacobian = pin.Jlog6(current.actInv(goal)) @ jacobian
            step = jacobian.T @ np.linalg.solve(jacobian @ jacobian.T + self.damping * np.eye(6), error)
            q = np.clip(q + step, self.model.lowerPositionLimit, self.model.upperPositionLimit)
        current = self._tcp_in_base(q)
        position_error = float(np.linalg.norm(goal.translation - current.translation))
        rotation_error = float(np.linalg.norm(pin.log3(current.rotation.T @ goal.rotation)))
        return IkSolution(self._from_model(q), position_error, rotation_error, iterations)


class RobotDescription(BaseModel):
    """An arm for CarryOn: its URDF, commanded joints, gripper, tool centre point and base pose."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    urdf_file: str = Field("", description="URDF path ('' = the Panda from the robot model assets)")
    joint_names: list[str] = Field(min_length=1, description="commanded joints, in the controller's order")
    gripper_joints: list[str] = Field(default_factory=list, description="finger joints adding up to the width")
    gripper_open_width_m: float = Field(0.08, gt=0.0, description="finger width of an open gripper, metres")
    symmetric_tool: bool = Field(
        True, description="a half turn about the tool's z axis grasps the same (a parallel gripper)"
    )
    tool_frame: str = Field(description="URDF frame the tool centre point is attached to")
    tcp_xyz: tuple[float, float, float] = Field(description="tool centre point in tool_frame, metres")
    tcp_rpy: tuple[float, float, float] = Field(description="its orientation, roll-pitch-yaw radians")
    base_xyz: tuple[float, float, float] = Field(description="the URDF base in 'world', metres")
    base_rpy: tuple[float, float, float] = Field(description="its orientation, roll-pitch-yaw radians")
    hand_links: list[str] = Field(
        default_factory=list,
        description="links the shield models as the hand (exact boxes, permitted contacts); every other "
        "moving link is covered by spheres and may touch nothing",
    )

    def arm_model(self) -> ArmModel:
        """The arm's collision model (spheres from the URDF's collision geometry), built once per process."""
        urdf = Path(self.urdf_file) if self.urdf_file else default_urdf()
        return _arm_model(self.model_dump_json(), str(urdf.resolve()), urdf.stat().st_mtime_ns if urdf.is_file() else 0)

    def kinematics(self) -> ArmKinematics:
        urdf = Path(self.urdf_file) if self.urdf_file else default_urdf()
        return ArmKinematics(
            urdf,
            self.joint_names,
            tool_frame=self.tool_frame,
            tcp=transform(self.tcp_xyz, self.tcp_rpy),
            base=transform(self.base_xyz, self.base_rpy),
        )


@functools.lru_cache(maxsize=8)
def _arm_model(description: str, urdf: str, _mtime_ns: int) -> ArmModel:
    from carryon_robot.core.arm_model import ArmModel

    robot = RobotDescription.model_validate_json(description)
    return ArmModel(
        Path(urdf),
        robot.joint_names,
        transform(robot.base_xyz, robot.base_rpy),
        tool_frame=robot.tool_frame,
        tcp=transform(robot.tcp_xyz, robot.tcp_rpy),
        gripper_joints=robot.gripper_joints,
        hand_links=robot.hand_links,
    )


def load_robot(robot_file: str) -> RobotDescription:
    """The robot description file (absolute, or relative to the config folder; '' = robot/panda.yaml)."""
    return load_yaml_model(RobotDescription, under_config_dir(robot_file, "robot", "panda.yaml"))
