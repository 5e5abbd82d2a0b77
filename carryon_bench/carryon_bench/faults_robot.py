"""The robot-profile probes of `carryon bench faults` (issue 43): arm_adapter_node started by
`carryon up --profile robot`, the fake controller (carryon_arm.fake_controller, NOT A ROBOT)
in its own process, and a process on the same domain that holds no key:

* **forged joint state**: a forger publishes joint states on the controller's topic with
  joint 1 raised by 0.9 rad (what a second joint_state_publisher or a GUI slider does), then
  unsigned chunks arrive, which the adapter refuses (each refusal made the adapter hold, at
  the forged joints before issue 43). The tool, from the controller's own joint states, must
  not move; the forger leaves before the next trial and the adapter is READY again;
* **malformed messages**: the fuzz probe (bench/fuzz_probe.py) against arm_adapter_node;
* **no keys**: `carryon up --profile robot` on a PC where `carryon keys init` never ran must
  exit with the configuration error before starting any node.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from carryon_bringup.core.graph import GraphSpec
from carryon_bringup.core.run_keys import KEYS_DIR_ENV
from carryon_bringup.graph_run import GraphRun

FORGED_FRAME = "forged"  # the forger's header.frame_id: its states are told apart from the controller's
FORGER = """
import sys, rclpy
from sensor_msgs.msg import JointState
rclpy.init()
node = rclpy.create_node("joint_state_forger")
pub = node.create_publisher(JointState, "/joint_states", 10)
q = [0.9, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785, 0.04, 0.04]  # the fake controller's home, joint 1 + 0.9 rad
names = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1", "panda_finger_joint2"]
def publish():
    msg = JointState(name=names, position=q)
    msg.header.stamp, msg.header.frame_id = node.get_clock().now().to_msg(), sys.argv[1]
    pub.publish(msg)
node.create_timer(0.005, publish)  # 200 Hz: twice the controller's rate
rclpy.spin(node)
"""


@contextmanager
def robot_graph(spec: GraphSpec, folder: Path) -> Iterator[GraphRun]:
    """arm_adapter_node (robot profile, its installed keys made for this run) and the fake controller."""
    with GraphRun(spec, folder / "graph-robot", profile="robot", only=["arm_adapter_node"]) as graph:
        log = (folder / "fake_controller.log").open("wb")
        env = {**graph.env, "CARRYON_CONFIG_DIR": str(spec.config_dir)}
        controller = subprocess.Popen(
            [sys.executable, "-m", "carryon_arm.fake_controller"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            graph.wait_ready(timeout_s=90.0)
            yield graph
        finally:
            from carryon_common.core.processes import stop_process

            stop_process(controller)
            log.close()


class ArmTruth:
    """The fake arm's tool from the controller's own joint states (forged ones left out), the
    adapter's refusals and its state, from a session that signs nothing."""

    def __init__(self, session: Any, robot_file: str) -> None:
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import JointState
        from std_msgs.msg import String

        from carryon_interfaces.msg import ActionChunk
        from carryon_robot.core.kinematics import load_robot

        self.session, self.kinematics = session, load_robot(robot_file).kinematics()
        self.tools: list[np.ndarray] = []
        self.forged = 0
        self.rejections: list[str] = []
        node = session.node
        node.create_subscription(JointState, "/joint_states", self._on_state, qos_profile_sensor_data)
        node.create_subscription(String, "/carryon/driver/rejections", lambda m: self.rejections.append(m.data), 50)
        self.chunks = node.create_publisher(ActionChunk, "/carryon/shield/chunk", 10)

    def _on_state(self, msg: Any) -> None:
        if msg.header.frame_id == FORGED_FRAME:
            self.forged += 1
        else:
            self.tools.append(self.kinematics.forward(np.array(msg.position[:7]))[0])
            del self.tools[:-2000]

    def spin(self, seconds: float, until: Any = lambda: False) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.session.executor.spin_once(timeout_sec=0.02)
            if until():
                return True
        return bool(until())

    def unsigned_chunk(self, chunk_id: int) -> None:
        from carryon_common import convert
        from carryon_common.core.chunk import Chunk, ChunkSource, Convention

        steps = np.tile([0.0, 0.005, 0.0], (4, 1))
        stamp = self.session.node.get_clock().now()
        chunk = Chunk(
            chunk_id,
            "",
            ChunkSource.OPERATOR,
            Convention.DELTA,
            "world",
            0.05,
            chunk_id,
            stamp.nanoseconds * 1e-9,
            steps,
            np.zeros((4, 3)),
            np.zeros(4),
        )
        self.chunks.publish(convert.chunk_to_msg(chunk, stamp.to_msg()))

    def ready(self) -> bool:
        from carryon_common.convert import msg_to_health
        from carryon_interfaces.srv import GetStatus

        answer = self.session.call(GetStatus, "/carryon/arm_adapter_node/get_status", GetStatus.Request(), 10.0)
        return bool(msg_to_health(answer.status).ready)


def forged_joint_state_trials(graph: GraphRun, robot_file: str, trials: int, folder: Path) -> list[dict[str, Any]]:
    """Per trial: how far the true tool got (mm) with the forger on the topic while refused
    chunks arrived, and whether the adapter said why it refused them."""
    from carryon_common.calls import RosSession
    from carryon_common.core.processes import stop_process

    rows = []
    with RosSession("forged_joint_states", domain_id=graph.domain_id, identity=None) as session:
        truth = ArmTruth(session, robot_file)
        if not truth.spin(30.0, lambda: len(truth.tools) > 5):
            raise RuntimeError("no joint states from the fake controller")
        for trial in range(trials):
            if not truth.spin(30.0, truth.ready):
                raise RuntimeError("arm_adapter_node not ready before a trial")
            start, since, seen = truth.tools[-1].copy(), len(truth.tools), len(truth.rejections)
            log = (folder / "forger.log").open("ab")
            forger = subprocess.Popen(
                [sys.executable, "-c", FORGER, FORGED_FRAME], env=graph.env, stdout=log, stderr=subprocess.STDOUT
            )
            try:
                forged = truth.forged
                truth.spin(20.0, lambda f=forged: truth.forged > f + 20)
                for i in range(5):  # refused chunks now and then: each one made the old adapter hold
                    truth.unsigned_chunk(10_000 * (trial + 1) + i)
                    truth.spin(0.3)
                truth.spin(1.5)  # the fake controller moves at 1.5 rad/s: 0.9 rad takes 0.6 s
            finally:
                stop_process(forger)
                log.close()
            moved = np.linalg.norm(np.array(truth.tools[since:] or [start]) - start, axis=1).max()
            rows.append(
                {
                    "moved_mm": float(moved * 1000),
                    "refused_unsigned": any("unsigned" in r for r in truth.rejections[seen:]),
                    "named_publishers": any("publishers on /joint_states" in r for r in truth.rejections[seen:]),
                }
            )
    return rows


def fuzz_rounds(graph: GraphRun, nodes: tuple[str, ...], objects: str, rounds: int, folder: Path) -> dict[str, Any]:
    """Rounds of the malformed-message probe against `nodes`: messages sent, nodes that died
    or stopped answering, and whether their processes are the same ones."""
    import json

    pids = graph.node_pids()
    sent, dead = 0, {}
    for index in range(rounds):
        command = [sys.executable, "-m", "carryon_bench.fuzz_probe", "--objects", objects]
        command += [arg for name in nodes for arg in ("--node", f"{name}={pids[name]}")]
        done = subprocess.run(command, env=graph.env, capture_output=True, text=True, timeout=600, check=False)
        (folder / f"fuzz-{'-'.join(nodes)}-{index}.log").write_text(done.stderr[-20000:])
        if done.returncode != 0 or not done.stdout:
            dead[f"round {index}"] = f"probe failed: {done.stderr[-500:]}"
            break
        result = json.loads(done.stdout)
        sent += sum(result["topics"].values()) + sum(len(v) for v in result["services"].values())
        dead.update(result["dead"])
        dead.update({name: "not alive after the round" for name, alive in result["alive"].items() if not alive})
    restarted = sorted(name for name in nodes if graph.node_pids().get(name) != pids[name])
    return {"sent": sent, "dead": dead, "restarted": restarted}


def keyless_starts(spec: GraphSpec, folder: Path, trials: int) -> list[dict[str, Any]]:
    """`carryon up --profile robot` with no keys installed: exit code, whether it named the
    fix, and whether any node was started (a logs folder)."""
    rows = []
    env = {**os.environ, KEYS_DIR_ENV: str(folder / "no-keys-here"), "NO_COLOR": "1"}
    for trial in range(trials):
        run_dir = folder / f"keyless-{trial}"
        command = [
            sys.executable,
            "-m",
            "carryon_bringup.cli",
            "--config-dir",
            str(spec.config_dir),
            "up",
            "--profile",
            "robot",
            "--run-dir",
            str(run_dir),
        ]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
        rows.append(
            {
                "exit_code": done.returncode,
                "names_the_fix": "carryon keys init" in done.stderr,
                "nodes_started": (run_dir / "logs").exists(),
            }
        )
    return rows


def robot_probes(spec: GraphSpec, folder: Path, trials: int, rounds: int) -> dict[str, Any]:
    """The forged-joint-state trials and malformed rounds against the robot profile's driver,
    and the starts without keys."""
    robot_file = str(spec.config_dir / "robot" / "panda.yaml")
    with robot_graph(spec, folder) as graph:
        forged = forged_joint_state_trials(graph, robot_file, trials, folder)
        malformed = fuzz_rounds(graph, ("arm_adapter_node",), "cube", rounds, folder)
    return {"forged_joint_state": forged, "malformed": malformed, "keyless": keyless_starts(spec, folder, trials)}
