"""Issue 43's probe on the robot path: a forged joint state must not move the arm.

arm_adapter_node (robot profile, started by `carryon up`) and the fake controller run in
their own processes, as in test_arm_adapter_graph.py, whose shield-playing Probe this test
uses (it signs chunks with the run's command key and sends the heartbeat). A third process,
the forger, publishes joint states on the controller's topic with joint 1 raised by 0.9 rad
(what a second joint_state_publisher, a GUI slider or another robot's driver does). Then a
chunk the adapter refuses arrives: an unsigned one. Before issue 43 the adapter's hold
commanded the forged joints, and the tool moved about 400 mm and stayed there.

What the tool does is judged on the controller's own joint states (forward kinematics of
the fake arm's true joints; the forger marks its messages), and on every trajectory the
controller received:

* default config: two publishers on /joint_states. The adapter refuses chunks, the arm
  holds, and the node is DEGRADED naming the topic and the count. Once the forger leaves,
  it is READY and moves the arm again;
* `max_joint_state_publishers: 2` (the forged states alone stand between the arm and the
  forger): the adapter refuses each jumped joint state and says so. An unsigned chunk in
  the middle of a signed one holds the arm at its last command, on the chunk's path.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import JointState
from test_arm_adapter_graph import HOME_TOOL, Probe, line
from trajectory_msgs.msg import JointTrajectory

from carryon_bench.faults_robot import FORGED_FRAME, FORGER
from carryon_bringup.core.graph import GraphSpec
from carryon_bringup.graph_run import GraphRun
from carryon_common.calls import RosSession
from carryon_common.convert import msg_to_health
from carryon_common.core import names
from carryon_common.core.command_auth import create_key_file, load_key
from carryon_common.core.processes import stop_process
from carryon_common.core.status import NodeState
from carryon_interfaces.srv import GetStatus
from carryon_robot.core.kinematics import ArmKinematics, load_robot

pytestmark = pytest.mark.graph
TOPIC = "/joint_trajectory_controller/joint_trajectory"


# As test_arm_adapter_graph.adapter_and_controller, for a loaded 2-core machine (see there).
LOADED_MACHINE = ("state_timeout_s=3.0", "watchdog_s=1.0", "shield_heartbeat_pause_s=3.0",
                  "shield_heartbeat_timeout_s=3.0", "command_max_age_s=3.0")  # fmt: skip


@contextmanager
def adapter_and_controller(config_dir: Path, tmp_path: Path, sets: list[str]) -> Iterator[GraphRun]:
    """arm_adapter_node by `carryon up --profile robot` (joint trajectories, its defaults
    plus `sets`) and the fake controller, each in its own process. The command key is the
    test's own (tmp_path/command.key), whatever keys `carryon up` would give the profile."""
    key = create_key_file(tmp_path / "keys" / "command.key")
    sets = [*LOADED_MACHINE, f"command_key_file={key}", *sets]
    extra = [arg for value in sets for arg in ("--set", f"arm_adapter_node.{value}")]
    with GraphRun(GraphSpec.load(config_dir), tmp_path / "run", profile="robot", only=["arm_adapter_node"],
                  extra_args=extra) as graph, (tmp_path / "controller.log").open("wb") as log:  # fmt: skip
        env = {**graph.env, "CARRYON_CONFIG_DIR": str(config_dir)}
        controller = subprocess.Popen([sys.executable, "-m", "carryon_arm.fake_controller"], env=env, stdout=log,
                                      stderr=subprocess.STDOUT)  # fmt: skip
        try:
            graph.wait_ready(timeout_s=90.0)
            yield graph
            assert controller.poll() is None, (tmp_path / "controller.log").read_text()[-3000:]
        finally:
            stop_process(controller)


class Truth:
    """The fake arm's tool from the controller's own joint states (forged ones left out) and
    from every trajectory it was sent, in world, metres."""

    def __init__(self, probe: Probe, kinematics: ArmKinematics) -> None:
        self.kinematics = kinematics
        self.tools: list[np.ndarray] = []
        self.forged = 0
        self.commanded: list[np.ndarray] = []
        node = probe.session.node
        node.create_subscription(JointState, "/joint_states", self._on_state, qos_profile_sensor_data)
        node.create_subscription(JointTrajectory, TOPIC, self._on_command, 100)

    def _on_state(self, msg: JointState) -> None:
        if msg.header.frame_id == FORGED_FRAME:
            self.forged += 1
            return
        self.tools.append(self.kinematics.forward(np.array(msg.position[:7]))[0])

    def _on_command(self, msg: JointTrajectory) -> None:
        self.commanded.append(self.kinematics.forward(np.array(msg.points[-1].positions))[0])

    def tool(self) -> np.ndarray:
        return self.tools[-1]

    def furthest_mm(self, origin: np.ndarray, since: int = 0) -> float:
        """How far the true tool got from `origin` since measurement `since`, mm."""
        return float(np.linalg.norm(np.array(self.tools[since:]) - origin, axis=1).max() * 1000)


@contextmanager
def forger(graph: GraphRun, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    log = (tmp_path / "forger.log").open("wb")
    process = subprocess.Popen([sys.executable, "-c", FORGER, FORGED_FRAME], env=graph.env, stdout=log,
                               stderr=subprocess.STDOUT)  # fmt: skip
    try:
        yield process
    finally:
        stop_process(process)
        log.close()


def health(session: RosSession) -> tuple[NodeState, str]:
    service = names.status_service("carryon", names.ARM_ADAPTER_NODE)
    status = msg_to_health(session.call(GetStatus, service, GetStatus.Request(), 10.0).status)
    return status.state, status.message


@pytest.mark.parametrize("publishers", [1, 2], ids=["default", "two_publishers_allowed"])
def test_forged_joint_states_and_a_refused_chunk_leave_the_arm_still(
    config_dir: Path, tmp_path: Path, publishers: int
) -> None:
    kinematics = load_robot(str(config_dir / "robot" / "panda.yaml")).kinematics()
    sets = [f"max_joint_state_publishers={publishers}"] if publishers != 1 else []
    with adapter_and_controller(config_dir, tmp_path, sets) as graph, \
            RosSession("joint_state_probe", domain_id=graph.domain_id) as session:  # fmt: skip
        probe = Probe(session, JointTrajectory, TOPIC, load_key(tmp_path / "keys" / "command.key"))
        truth = Truth(probe, kinematics)
        assert probe.spin(30.0, lambda: len(probe.poses) > 5 and len(truth.tools) > 5), "no ee_pose / joint states"
        assert np.abs(truth.tool() - HOME_TOOL).max() < 2e-3
        if publishers == 1:
            idle_forgery_then_recovery(graph, tmp_path, session, probe, truth)
        else:
            forgery_mid_chunk(graph, tmp_path, probe, truth)


def idle_forgery_then_recovery(graph: GraphRun, tmp_path: Path, session: RosSession, probe: Probe,
                               truth: Truth) -> None:  # fmt: skip
    start, since = truth.tool(), len(truth.tools)
    with forger(graph, tmp_path) as process:
        assert probe.spin(20.0, lambda: truth.forged > 20), f"no forged joint states (forger alive: {process.poll()})"
        for _ in range(10):  # a refused chunk now and then: each one made the old adapter hold
            probe.send(line(start, start + np.array([0.0, 0.02, 0.0]), 4), key=b"")
            probe.spin(0.3)
        assert any("unsigned" in r for r in probe.rejections), probe.rejections[-5:]
        probe.spin(2.0)  # the fake controller moves at 1.5 rad/s: 0.9 rad would take 0.6 s
        moved = truth.furthest_mm(start, since)
        print(f"default config: the tool moved at most {moved:.1f} mm with the forger on the topic")
        assert moved < 3.0, f"the tool moved {moved:.0f} mm: {probe.rejections[-5:]}"
        assert all(np.linalg.norm(c - start) < 3e-3 for c in truth.commanded), "a forged position was commanded"
        assert any("2 publishers on /joint_states" in r for r in probe.rejections), probe.rejections[-5:]
        state, message = health(session)
        assert state == NodeState.DEGRADED and "2 publishers on /joint_states" in message, message
        signed = len(probe.rejections)
        probe.send(line(start, start + np.array([0.0, 0.02, 0.0]), 4))
        assert probe.spin(5.0, lambda: any("2 publishers" in r for r in probe.rejections[signed:])), probe.rejections[
            signed:
        ]
    # The forger left: one publisher again, and the arm moves on a signed chunk.
    for _ in range(20):  # the readiness check runs once a second
        if health(session)[0] == NodeState.READY:
            break
        probe.spin(0.5)
    assert health(session)[0] == NodeState.READY, health(session)
    goal = start + np.array([0.0, 0.02, 0.0])
    probe.send(line(start, goal, 8))
    assert probe.spin(15.0, lambda: np.abs(truth.tool() - goal).max() < 3e-3), (truth.tool(), probe.rejections[-5:])


def forgery_mid_chunk(graph: GraphRun, tmp_path: Path, probe: Probe, truth: Truth) -> None:
    start = truth.tool()
    goal = start + np.array([0.0, 0.15, 0.0])
    with forger(graph, tmp_path) as process:
        assert probe.spin(20.0, lambda: truth.forged > 20), f"no forged joint states (forger alive: {process.poll()})"
        since = len(truth.tools)
        probe.send(line(start, goal, 60))  # 3 s of steps; the forged states keep coming
        assert probe.spin(10.0, lambda: truth.tool()[1] - start[1] > 0.02), (truth.tool(), probe.rejections[-5:])
        probe.send(line(start, goal, 4), key=b"")  # refused mid-chunk: the arm holds
        assert probe.spin(5.0, lambda: any("unsigned" in r for r in probe.rejections)), probe.rejections[-5:]
        probe.spin(2.0)
        held = truth.tool()
        probe.spin(1.0)
        still = float(np.linalg.norm(truth.tool() - held) * 1000)
        path = np.array(truth.tools[since:])
        off_path = float(np.abs(path[:, [0, 2]] - start[[0, 2]]).max() * 1000)
        print(f"mid-chunk: the tool left the chunk's path by at most {off_path:.1f} mm, then moved {still:.1f} mm")
        assert off_path < 3.0, f"the tool left the chunk's path by {off_path:.0f} mm: {probe.rejections[-5:]}"
        assert still < 2.0 and np.abs(held - goal).max() > 0.02, (still, held, goal)
        commanded = np.array(truth.commanded)
        assert len(commanded) >= 5, len(commanded)  # the chunk's steps and the hold
        assert np.abs(commanded[:, [0, 2]] - start[[0, 2]]).max() < 3e-3, "a forged position was commanded"
        assert any("panda_joint1 moved 0.9" in r for r in probe.rejections), probe.rejections[-5:]  # and said so
