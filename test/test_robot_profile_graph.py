"""The robot profile with no simulator in it (issue 18): arm_adapter_node, perception_node,
shield_node, judge_node and policy_node started by `carryon up --profile robot`, in separate
processes over DDS, with the simulator's code and scenes taken off their import path.

The real world is played on the test's side, by processes a robot would have instead: the
fake controller (carryon_arm.fake_controller: the arm's joints, NOT A ROBOT), a camera-driver
stand-in (carryon_sim.harness.fakes.camera_driver: the food scene rendered with the arm posed
from the controller's joint states, published under realsense2_camera's topic names and
encodings from config/arm/cameras.yaml) and a fake openpi policy server (a short +x motion).

`carryon estop --release` releases the stop the robot profile starts with; `carryon policy
run` drives the VLA through the shield, whose released steps reach the controller as joint
trajectories and move the tool; the geometric judge answers on scene objects from
perception_node's masks of the bridged cameras; `carryon status` finds the robot profile
by itself and shows perception_node ready, and every publisher and subscription connect (QoS, by graph
introspection, recorder_node included). No sim_node runs, no runtime process has the
simulator loaded or a simulator file open, and no sim/ topic exists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
import pytest
from geometry_msgs.msg import PoseStamped
from trajectory_msgs.msg import JointTrajectory

from carryon_arm.core.cameras import load_camera_map
from carryon_bringup.core.graph import GraphSpec
from carryon_bringup.graph_run import GraphRun
from carryon_common.calls import RosSession
from carryon_common.core.processes import stop_process
from carryon_common.node import latched_qos
from carryon_common.qos_audit import qos_mismatches
from carryon_interfaces.msg import ActionChunk, EstopState, PerceivedScene, ShieldEvent, Subtask, Verdict
from carryon_interfaces.srv import Judge
from carryon_sim.harness.fakes.camera_driver import write_simulated_calibration
from carryon_sim.harness.fakes.openpi_server import STEP_M, FakeOpenpiServer

pytestmark = pytest.mark.graph

# What `carryon policy run` and a judge verdict need, and nothing else (no memory, planner,
# recovery or recorder: this test is about the robot path from cameras to controller).
# recorder_node too: it must take the QoS of what it records (the cameras' best-effort streams).
RUNTIME_NODES = ("arm_adapter_node", "perception_node", "shield_node", "judge_node", "policy_node", "recorder_node")
TRAJECTORY_TOPIC = "/joint_trajectory_controller/joint_trajectory"  # arm_adapter_node's default command topic
INSTRUCTION = "move the gripper forward"  # openpi takes any prompt; the fake server answers +x
STEPS = 40  # 5 inferences of 8 steps: 8 cm along +x at most, high above the table (safe, released)
SIMULATOR_MARKS = ("carryon_sim", "mujoco", "config/scenes", "sim_node")
RELEASED = (ShieldEvent.DECISION_RELEASED_ALL, ShieldEvent.DECISION_RELEASED_PREFIX)
FAILED_CLOSED = (ShieldEvent.DECISION_REJECTED_STALE, ShieldEvent.DECISION_REJECTED_NO_PERCEPTION)


def without_simulator(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the simulator package taken off the Python path and the ament index, so a
    runtime node that imported it would fail (with a merged install it stays findable: the
    /proc checks below still see a loaded simulator)."""
    out = dict(env)
    for key in ("PYTHONPATH", "AMENT_PREFIX_PATH", "CMAKE_PREFIX_PATH"):
        if key in out:
            out[key] = os.pathsep.join(p for p in out[key].split(os.pathsep) if "carryon_sim" not in p)
    return out


@contextmanager
def real_world(graph: GraphRun, tmp_path: Path, config_dir: Path, cameras_file: Path) -> Iterator[None]:
    """The fake controller and the camera-driver stand-in, in the graph's domain. The driver
    is the only process with the simulator; it gets the test's own environment."""
    domain = {"ROS_DOMAIN_ID": str(graph.domain_id), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    commands = {
        "fake_controller": ([sys.executable, "-m", "carryon_arm.fake_controller"], graph.env),
        "camera_driver": (
            [sys.executable, "-m", "carryon_sim.harness.fakes.camera_driver", "--cameras-file", str(cameras_file),
             "--scene", "food_serving", "--rate-hz", "5"],
            {**os.environ, **domain},
        ),
    }  # fmt: skip
    with ExitStack() as stack:
        processes = []
        for name, (command, env) in commands.items():
            log = stack.enter_context((tmp_path / f"{name}.log").open("wb"))
            configured = {**env, "CARRYON_CONFIG_DIR": str(config_dir)}
            process = subprocess.Popen(command, env=configured, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
            processes.append(process)
            stack.callback(_stop, process)
        yield
        for name, process in zip(commands, processes, strict=True):
            assert process.poll() is None, f"{name} died:\n{(tmp_path / f'{name}.log').read_text()[-3000:]}"


def _stop(process: subprocess.Popen[bytes]) -> None:
    stop_process(process)


class Probe:
    """The test's eyes on the graph: shield decisions, released chunks, the controller's
    commands, the tool pose, the e-stop state and perception's scene."""

    def __init__(self, session: RosSession) -> None:
        node = session.node
        self.session = session
        self.events: list[ShieldEvent] = []
        self.released: list[ActionChunk] = []
        self.trajectories: list[JointTrajectory] = []
        self.poses: list[PoseStamped] = []
        self.estop: list[EstopState] = []
        self.scenes: list[PerceivedScene] = []
        node.create_subscription(ShieldEvent, "/carryon/shield/events", self.events.append, 100)
        node.create_subscription(ActionChunk, "/carryon/shield/chunk", self.released.append, 100)
        node.create_subscription(JointTrajectory, TRAJECTORY_TOPIC, self.trajectories.append, 100)
        node.create_subscription(PoseStamped, "/carryon/ee_pose", self.poses.append, 10)
        node.create_subscription(EstopState, "/carryon/estop/state", self.estop.append, latched_qos())
        node.create_subscription(PerceivedScene, "/carryon/perception/scene", self._on_scene, 10)
        self.scene_lags: list[float] = []  # seconds from the newest image to its perceived scene

    def _on_scene(self, msg: PerceivedScene) -> None:
        self.scenes.append(msg)
        self.scene_lags.append(round(time.time() - (msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9), 2))

    def spin(self, seconds: float, until: Callable[[], bool] = lambda: False) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.session.executor.spin_once(timeout_sec=0.05)
            if until():
                return True
        return until()

    def tool(self) -> np.ndarray:
        p = self.poses[-1].pose.position
        return np.array([p.x, p.y, p.z])

    def labels(self) -> set[str]:
        return {o.label for o in self.scenes[-1].objects} if self.scenes else set()


def carryon(graph: GraphRun, config_dir: Path, probe: Probe, *args: str, timeout_s: float = 120.0) -> tuple[int, str]:
    """Run the `carryon` CLI in the graph's domain while the probe keeps listening; (exit code, output)."""
    command = [sys.executable, "-m", "carryon_bringup.cli", "--config-dir", str(config_dir), *args]
    process = subprocess.Popen(
        command, env={**graph.env, "NO_COLOR": "1"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    probe.spin(timeout_s, lambda: process.poll() is not None)
    if process.poll() is None:
        process.kill()
    output, _ = process.communicate(timeout=10)
    return process.wait(), output


def judge(session: RosSession, subtask: Subtask, since_progress_s: float) -> Judge.Response:
    """The judge's answer once perception_node's masks of both cameras are there (a node is
    ready before its first images have been perceived)."""
    request = Judge.Request(subtask=subtask, since_progress_s=since_progress_s)
    for _ in range(40):
        response = session.call(Judge, "/carryon/judge/judge", request, timeout_s=20.0)
        if response.status == Judge.Response.STATUS_OK:
            break
        time.sleep(0.5)
    return response


def simulator_traces(pid: int) -> list[str]:
    """Where a process shows the simulator: its command line, a loaded library or module
    file, an open file (the simulator's package, MuJoCo, a scene file)."""
    proc = Path(f"/proc/{pid}")
    found = []
    cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    if any(mark in cmdline for mark in SIMULATOR_MARKS):
        found.append(f"command line: {cmdline}")
    maps = {line.split()[-1] for line in (proc / "maps").read_text().splitlines() if "/" in line}
    found += [f"mapped: {path}" for path in sorted(maps) if any(mark in path for mark in SIMULATOR_MARKS)]
    for fd in (proc / "fd").iterdir():
        try:
            target = str(fd.readlink())
        except OSError:
            continue  # closed meanwhile
        if any(mark in target for mark in SIMULATOR_MARKS):
            found.append(f"open: {target}")
    return found


def test_policy_run_and_judge_on_the_robot_profile_without_a_simulator(config_dir: Path, tmp_path: Path) -> None:
    spec = GraphSpec.load(config_dir)
    # The stand-in cell's camera calibration: config/arm/cameras.yaml's driver topics, depth
    # scale and frames, with the poses where the simulator's cameras are (what calibrating
    # this cell would measure; its views are those perception's catalog was made from).
    cameras_file = write_simulated_calibration(config_dir / "arm" / "cameras.yaml", tmp_path / "cell_cameras.yaml")
    with FakeOpenpiServer() as server:
        sets = [
            f"arm_adapter_node.cameras_file={cameras_file}",
            f"policy_node.remote_uri={server.uri}",
            # The "robot" here looks at the simulated food scene, so perception names its
            # objects with the simulator's catalog (object *types*, like a detector's classes,
            # read from config/perception/, not from the simulator) and the scene's regions
            # (config/planner/locations.yaml; robot_locations.yaml holds the same two regions).
            # judge/objects.yaml, the robot profile's geometry file, already lists these objects.
            "perception_node.catalog_file=perception/catalog_sim.yaml",
            "perception_node.objects=[pink_cover, carrot, plate, meat, bowl, bottle]",
            "perception_node.locations_file=planner/locations.yaml",
            # Timing for a loaded 2-core machine (defaults 0.5 s, 0.25 s, 1.0 s, 5 s): the
            # Python fake controller's joint states can arrive late, and perception's masks
            # (both cameras, one process) came 0.6-1.8 s after their images at a load average
            # of 13; the shield still fails closed on anything older.
            "arm_adapter_node.state_timeout_s=1.5", "arm_adapter_node.watchdog_s=1.0",
            "perception_node.max_image_age_s=3.0",
            "policy_node.max_observation_age_s=1.5", "policy_node.observation_timeout_s=20.0",
            *(f"shield_node.max_{kind}_age_s=3.0" for kind in ("observation", "depth", "mask", "state")),
            "judge_node.max_image_age_s=3.0",
        ]  # fmt: skip
        extra = [arg for value in sets for arg in ("--set", value)]
        runtime_env = without_simulator(os.environ)
        with GraphRun(spec, tmp_path / "run", profile="robot", only=RUNTIME_NODES, extra_args=extra,
                      env=runtime_env) as graph, real_world(graph, tmp_path, config_dir, cameras_file), \
                RosSession("robot_profile_probe", domain_id=graph.domain_id) as session:  # fmt: skip
            graph.wait_ready(timeout_s=150.0)
            assert sorted(graph.node_pids()) == sorted(RUNTIME_NODES)
            probe = Probe(session)
            food = {"pink_cover", "plate", "meat", "bowl", "bottle"}  # the carrot is under the cover
            assert probe.spin(90.0, lambda: food <= probe.labels() and bool(probe.poses)), (
                f"perception saw {probe.labels()} (diagnostics {list(probe.scenes[-1].diagnostics)})"
                if probe.scenes
                else f"no perception/scene; ee_pose: {len(probe.poses)}\n{graph.output()[-3000:]}"
            )

            # The robot profile starts with the e-stop engaged; the operator releases it.
            assert probe.spin(10.0, lambda: bool(probe.estop)) and probe.estop[0].active, probe.estop
            code, output = carryon(graph, config_dir, probe, "estop", "--release", "--timeout", "30")
            assert code == 0, output
            assert probe.spin(10.0, lambda: not probe.estop[-1].active), probe.estop[-1]

            start = probe.tool()
            code, output = carryon(graph, config_dir, probe, "--timeout", "30", "policy", "run", INSTRUCTION,
                                   "--steps", str(STEPS), "--subtask", "s1", timeout_s=180.0)  # fmt: skip
            assert code == 0 and f"{STEPS} steps, 5 chunks" in output, output
            probe.spin(3.0)  # the last released steps execute
            mine = [e for e in probe.events if e.subtask_id == "s1"]
            released = [e for e in mine if e.decision in RELEASED and e.released_steps > 0]
            reasons = [(e.decision, e.reason) for e in mine], f"perception lags {probe.scene_lags[-20:]}"
            # Released; otherwise only failed closed for perception (masks late on a loaded machine).
            assert len(mine) == 5 and len(released) >= 2, reasons
            unexpected = [
                f"{e.decision} {e.reason} at ({e.blocking_point.x:.3f}, {e.blocking_point.y:.3f}, "
                f"{e.blocking_point.z:.3f}), holding {e.holding}"
                for e in mine
                if e.decision not in RELEASED + FAILED_CLOSED
            ]
            assert not unexpected, "\n".join([*unexpected, f"tool {probe.tool()}", str(reasons)])
            assert all(e.obstacle_points > 100 for e in released), [e.obstacle_points for e in released]
            assert sum(len(c.steps) for c in probe.released if c.subtask_id == "s1") >= 16, reasons
            # The controller got joint trajectories (one released step per control period; a
            # new chunk replaces the rest of the last one, so on a loaded machine fewer steps
            # run than were released) and the tool followed them along +x, and only along x.
            moves = [t for t in probe.trajectories if t.points and not t.points[0].velocities]  # not holds
            assert len(moves) >= 5 and moves[-1].joint_names[0] == "panda_joint1", len(probe.trajectories)
            moved, steps = probe.tool() - start, sum(e.released_steps for e in released)
            assert 0.01 < moved[0] <= steps * STEP_M + 0.005, (moved, steps, len(moves))
            assert np.abs(moved[1:]).max() < 0.005, (moved, steps, len(moves))

            # What the VLA saw: both cameras, bridged from the driver topics, and the prompt.
            assert server.requests and all(r["prompt"] == INSTRUCTION for r in server.requests)
            for key in ("observation/image", "observation/wrist_image"):
                image = np.asarray(server.requests[-1][key])
                assert image.shape == (224, 224, 3) and image.std() > 10.0, (key, image.shape, image.std())

            # The geometric judge on perception_node's masks of the bridged cameras.
            cover = Subtask(id="j1", kind=Subtask.KIND_VLA, objective="the pink cover is off the carrot",
                            instruction="open the pink cover", target="pink_cover")  # fmt: skip
            answer = judge(session, cover, since_progress_s=30.0)  # past the stuck timeout (20 s)
            assert answer.status == Judge.Response.STATUS_OK, answer.message
            verdict = answer.verdict
            assert verdict.backend == "geometric" and verdict.status == Verdict.STATUS_FAILED, verdict.reason
            assert "pink_cover moved 0 cm" in verdict.reason, verdict.reason
            meat = Subtask(id="j2", kind=Subtask.KIND_VLA, objective="the meat is on the plate",
                           instruction="put the meat on the plate", target="meat", destination="plate")  # fmt: skip
            answer = judge(session, meat, since_progress_s=0.0)
            assert answer.status == Judge.Response.STATUS_OK, answer.message
            assert answer.verdict.status == Verdict.STATUS_RUNNING, answer.verdict.reason
            assert "meat was already inside plate at baseline" in answer.verdict.reason, answer.verdict.reason

            # `carryon status` finds the robot profile running by itself (no --profile, no
            # $CARRYON_PROFILE): the nodes not started are down (exit 1), perception is ready.
            assert "CARRYON_PROFILE" not in graph.env
            health: dict[str, dict[str, object] | None] = {}
            for _ in range(5):  # perception is degraded for a moment when a frame comes too late
                code, output = carryon(graph, config_dir, probe, "status", "--json")
                health = json.loads(output[output.find("{") : output.rfind("}") + 1] or "{}")
                if (health.get("perception_node") or {}).get("ready"):
                    break
                probe.spin(1.0)
            assert (health.get("perception_node") or {}).get("ready"), output
            assert "arm_adapter_node" in health and "sim_node" not in health, output  # the robot profile's nodes
            assert code == 1 and all(health[name] is not None for name in RUNTIME_NODES), output
            assert {health[name]["profile"] for name in RUNTIME_NODES} == {"robot"}, output  # told by `carryon up`

            # Every publisher and subscription of the robot profile connect (issue 22).
            assert qos_mismatches(session.node, spec.namespace) == []
            # No simulator anywhere in the runtime graph.
            names = {name for name, _ns in session.node.get_node_names_and_namespaces()}
            topics = {name for name, _types in session.node.get_topic_names_and_types()}
            assert "sim_node" not in names, sorted(names)
            cameras = load_camera_map(config_dir / "arm" / "cameras.yaml").cameras.values()
            driver_topics = {topic for c in cameras for topic in (c.color, c.depth, c.camera_info)}
            assert driver_topics <= topics, sorted(driver_topics - topics)  # the images came under a driver's names
            assert not [t for t in topics if t.startswith("/carryon/sim/") or t == "/clock"], sorted(topics)
            assert graph.process is not None
            traces = {name: simulator_traces(pid) for name, pid in graph.node_pids().items()}
            traces["carryon up"] = simulator_traces(graph.process.pid)
            assert not any(traces.values()), traces
