"""fake_controller: a stand-in for a real arm's ros2_control controllers, for tests and dry runs.

It accepts what arm_adapter_node sends — `trajectory_msgs/JointTrajectory` (the last point's
positions, reached by its time_from_start at most at `max_velocity_rad_s`) or
`geometry_msgs/PoseStamped` tool targets (solved with the same Pinocchio IK) — plus a finger
width, and publishes `sensor_msgs/JointState` at `rate_hz` like joint_state_broadcaster.
NOT A ROBOT and not a physics simulation: joints move kinematically at a capped speed.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pinocchio as pin
from geometry_msgs.msg import PoseStamped
from scipy.spatial.transform import Rotation
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64
from trajectory_msgs.msg import JointTrajectory

from carryon_arm.core.config import FakeControllerConfig
from carryon_common.core.status import implemented
from carryon_common.node import CarryOnNode, run_node
from carryon_common.qos import TopicKind, qos_of
from carryon_robot.core.kinematics import load_robot


class FakeControllerNode(CarryOnNode):
    def __init__(self, **node_kwargs: Any) -> None:
        capabilities = (implemented("fake.controller", "kinematic joint-trajectory / pose-target follower"),)
        super().__init__("fake_controller", FakeControllerConfig, capabilities=capabilities, **node_kwargs)
        cfg: FakeControllerConfig = self.config
        robot = load_robot(cfg.robot_file)
        self.kinematics = robot.kinematics()
        self.fingers = list(robot.gripper_joints)
        self.joint_names = list(self.kinematics.joint_names)
        self.q = np.array(cfg.initial_q, dtype=np.float64)
        self.target = self.q.copy()
        self.speed = np.full(len(self.q), cfg.max_velocity_rad_s)
        self.width = self.width_target = cfg.initial_width_m
        self.commands = 0
        self.lock = threading.Lock()
        self.state_pub = self.create_publisher(JointState, cfg.joint_states_topic, qos_of(TopicKind.STATE))
        command = qos_of(TopicKind.COMMAND)
        if cfg.interface == "joint_trajectory":
            self.create_subscription(JointTrajectory, cfg.command_topic, self._on_trajectory, command)
        else:
            self.create_subscription(PoseStamped, cfg.command_topic, self._on_pose, command)
        if cfg.gripper_command_topic:
            self.create_subscription(Float64, cfg.gripper_command_topic, self._on_width, command)
        self.period = 1.0 / cfg.rate_hz
        self.create_timer(self.period, self._on_tick)
        self.get_logger().warning("fake_controller is NOT A ROBOT: joints follow commands kinematically")
        self.set_ready()

    def _aim(self, target: np.ndarray, duration_s: float) -> None:
        cfg: FakeControllerConfig = self.config
        with self.lock:
            self.target = target
            distance = np.abs(target - self.q)
            self.speed = np.minimum(cfg.max_velocity_rad_s, distance / max(duration_s, self.period) + 1e-9)
            self.commands += 1

    def _on_trajectory(self, msg: JointTrajectory) -> None:
        if not msg.points:
            return
        try:
            order = [list(msg.joint_names).index(name) for name in self.joint_names]
        except ValueError:
            self.get_logger().error(f"trajectory joints {list(msg.joint_names)} differ from {self.joint_names}")
            return
        point = msg.points[-1]
        duration = point.time_from_start.sec + point.time_from_start.nanosec * 1e-9
        self._aim(np.array([point.positions[i] for i in order], dtype=np.float64), duration)

    def _on_pose(self, msg: PoseStamped) -> None:
        p, o = msg.pose.position, msg.pose.orientation
        in_base = pin.SE3(Rotation.from_quat([o.x, o.y, o.z, o.w]).as_matrix(), np.array([p.x, p.y, p.z]))
        world = self.kinematics.base * in_base  # targets arrive in the URDF base frame
        with self.lock:
            seed = self.q.copy()
        solution = self.kinematics.inverse(seed, world.translation, world.rotation)
        self._aim(solution.q, self.period)

    def _on_width(self, msg: Float64) -> None:
        with self.lock:
            self.width_target = float(np.clip(msg.data, 0.0, 0.08))

    def _on_tick(self) -> None:
        with self.lock:
            step = np.clip(self.target - self.q, -self.speed * self.period, self.speed * self.period)
            self.q = self.q + step
            self.width += float(np.clip(self.width_target - self.width, -0.1 * self.period, 0.1 * self.period))
            q, width = self.q.copy(), self.width
        fingers = [width / len(self.fingers)] * len(self.fingers)
        msg = JointState(name=[*self.joint_names, *self.fingers], position=[*map(float, q), *fingers])
        msg.header.stamp = self.get_clock().now().to_msg()
        self.state_pub.publish(msg)


def main() -> int:
    return run_node(FakeControllerNode, threads=1)  # short callbacks only (see run_node)


if __name__ == "__main__":
    raise SystemExit(main())
