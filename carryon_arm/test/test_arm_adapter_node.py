"""arm_adapter_node in-process (issue 43): a joint state that jumps is refused, reported and
never commanded; a second publisher on the joint-states topic refuses chunks and degrades the
node until it leaves. The test's peer plays the controller (joint states at 100 Hz, the
trajectories it receives) and the shield (chunks; no command key, so none is verified)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory

from carryon_arm.node import ArmAdapterNode
from carryon_common import convert as common_convert
from carryon_common.core.chunk import Chunk, ChunkSource, Convention
from carryon_common.core.status import NodeState
from carryon_interfaces.msg import ActionChunk

HOME = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785])
HOME_TOOL = np.array([0.4635, 0.0, 0.8297])  # the tool centre point at HOME, world
DOWN_ROTVEC = np.array([np.pi / np.sqrt(2), np.pi / np.sqrt(2), 0.0])
ARM = [f"panda_joint{i}" for i in range(1, 8)]
FINGERS = ["panda_finger_joint1", "panda_finger_joint2"]
TRAJECTORIES = "/joint_trajectory_controller/joint_trajectory"


class Controller:
    """The peer's side: joint states of an arm that is at each trajectory's target at once,
    the commands that reach the controller, driver/rejections."""

    def __init__(self, peer: Any) -> None:
        self.peer, self.lock = peer, threading.Lock()
        self.q = HOME.copy()
        self.pub = peer.create_publisher(JointState, "/joint_states", 10)
        self.trajectories: list[JointTrajectory] = []
        self.rejections: list[str] = []
        self.chunks = peer.create_publisher(ActionChunk, "shield/chunk", 10)
        peer.create_subscription(JointTrajectory, TRAJECTORIES, self._on_trajectory, 10)
        peer.create_subscription(String, "driver/rejections", lambda m: self.rejections.append(m.data), 10)
        peer.create_timer(0.01, lambda: self.publish(self.q))
        self.next_id = 1

    def _on_trajectory(self, msg: JointTrajectory) -> None:
        self.trajectories.append(msg)
        self.q = np.array(msg.points[-1].positions)

    def publish(self, q: np.ndarray) -> None:
        msg = JointState(name=ARM + FINGERS, position=[*map(float, q), 0.04, 0.04])
        msg.header.stamp = self.peer.get_clock().now().to_msg()
        self.pub.publish(msg)

    def send(self, offsets: list[list[float]], frame: str = "world") -> int:
        n = len(offsets)
        chunk = Chunk(self.next_id, "s1", ChunkSource.POLICY, Convention.ABSOLUTE, frame, 0.05, 1, 0.0,
                      HOME_TOOL + np.array(offsets), np.tile(DOWN_ROTVEC, (n, 1)), np.zeros(n))  # fmt: skip
        self.next_id += 1
        self.chunks.publish(common_convert.chunk_to_msg(chunk, self.peer.get_clock().now().to_msg()))
        return chunk.chunk_id

    def commanded_tools(self, node: ArmAdapterNode) -> np.ndarray:
        """The tool positions of every trajectory the controller received (FK), (N, 3) m."""
        qs = [np.array(t.points[-1].positions) for t in list(self.trajectories) if t.points]
        return np.array([node.kinematics.forward(q)[0] for q in qs]).reshape(-1, 3)


def start(ros: Any, **params: object) -> tuple[ArmAdapterNode, Controller]:
    overrides = [Parameter(k, value=v) for k, v in {"state_timeout_s": 2.0, "watchdog_s": 1.0, **params}.items()]
    node = ros.add(ArmAdapterNode(namespace="carryon", context=ros.context, parameter_overrides=overrides))
    return node, Controller(ros.peer("fake_controller"))


def test_forged_joint_states_are_refused_and_never_commanded(ros: Any, wait_until: Callable[..., bool]) -> None:
    node, controller = start(ros)
    assert wait_until(lambda: node.executor_.state is not None, 10.0), "no position taken"
    forged = HOME + np.array([0.9, 0, 0, 0, 0, 0, 0])  # the probe: joint 1 raised by 0.9 rad

    # Idle: forged joint states between the genuine ones, then a chunk the driver refuses.
    for _ in range(20):
        controller.publish(forged)
    refused = controller.send([[0.0, 0.01, 0.0]], frame="panda_link0")
    assert wait_until(lambda: any(f"chunk {refused}:" in r for r in controller.rejections), 10.0)
    assert wait_until(lambda: any("panda_joint1 moved 0.900 rad" in r for r in controller.rejections), 10.0)
    assert not controller.trajectories  # idle: a hold sends nothing
    assert np.array_equal(node.executor_.state.q, HOME)  # type: ignore[union-attr]
    assert wait_until(lambda: node.health().state == NodeState.DEGRADED, 5.0)
    assert "joint states refused" in node.health().message

    # Executing: the arm follows a released chunk; forged states and a refused chunk mid-way
    # hold it at its last command, never at the forged joints.
    path = [[0.0, 0.005 * i, 0.0] for i in range(1, 41)]
    controller.send(path)
    assert wait_until(lambda: len(controller.trajectories) >= 3, 10.0)
    for _ in range(20):
        controller.publish(forged)
    refused = controller.send([[0.0, 0.01, 0.0]], frame="panda_link0")
    assert wait_until(lambda: any(f"chunk {refused}:" in r for r in controller.rejections), 10.0)
    count = len(controller.trajectories)
    assert controller.trajectories[-1].points[0].velocities  # a hold (zero velocity), at the last step sent
    tools = controller.commanded_tools(node)
    # Every command on the chunk's path (+y from HOME_TOOL): the forged joints would have
    # turned the tool 0.9 rad about the base (40 cm away).
    assert np.abs(tools[:, [0, 2]] - HOME_TOOL[[0, 2]]).max() < 2e-3, tools
    assert 0.0 < tools[-1, 1] - HOME_TOOL[1] < 0.2
    assert not wait_until(lambda: len(controller.trajectories) > count, 1.0)  # holds once
    assert node.executor_.gate.refused >= 2  # best effort: some of each burst of 20 are dropped


def test_a_second_joint_state_publisher_refuses_chunks_until_it_leaves(
    ros: Any, wait_until: Callable[..., bool]
) -> None:
    node, controller = start(ros)
    assert wait_until(lambda: node.executor_.state is not None, 10.0), "no position taken"
    slider = ros.peer("joint_state_publisher_gui")
    second = slider.create_publisher(JointState, "/joint_states", 10)
    assert wait_until(lambda: node.health().state == NodeState.DEGRADED, 10.0)
    assert "2 publishers on /joint_states (limit 1" in node.health().message
    sent = controller.send([[0.0, 0.005, 0.0]])
    assert wait_until(lambda: any(f"chunk {sent}:" in r and "2 publishers" in r for r in controller.rejections), 10.0)
    assert not controller.trajectories

    slider.destroy_publisher(second)
    assert wait_until(lambda: node.health().state == NodeState.READY, 10.0), node.health().message
    controller.send([[0.0, 0.005 * i, 0.0] for i in range(1, 5)])
    assert wait_until(lambda: len(controller.trajectories) >= 4, 10.0), controller.rejections
    assert not controller.trajectories[0].points[0].velocities  # steps, not holds


def test_the_publisher_limit_is_configurable(ros: Any, wait_until: Callable[..., bool]) -> None:
    """An arm and a gripper driver on one topic: max_joint_state_publishers 2 allows both."""
    node, controller = start(ros, max_joint_state_publishers=2)
    gripper = ros.peer("gripper_driver").create_publisher(JointState, "/joint_states", 10)
    assert wait_until(lambda: node.count_publishers("/joint_states") == 2, 10.0)
    assert wait_until(lambda: node.executor_.state is not None, 10.0), "no position taken"
    gripper.publish(JointState(name=FINGERS, position=[0.01, 0.01]))
    controller.send([[0.0, 0.005 * i, 0.0] for i in range(1, 5)])
    assert wait_until(lambda: len(controller.trajectories) >= 4, 10.0), controller.rejections
    assert node.health().state == NodeState.READY, node.health().message
