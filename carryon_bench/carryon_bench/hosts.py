"""`carryon bench hosts`: the graph split over a robot PC and a GPU box (issue 22), as two
network namespaces of this machine joined by a link (carryon_bringup/netns.py; needs root).

The robot side runs the simulator (the arm's driver and cameras), perception, the shield,
the judge, recovery, memory and the planner; the GPU side runs the policy node with an
openpi-protocol policy server (the fake one, which moves the tool along +x) and the
planner's model server (a stub OpenAI-compatible server where llm_server_node would serve
the model, reached over HTTP across the link): the policy node reads the cameras and the
arm's state across the link and sends its chunks back across it. Measured, from the robot
side:

* policy chunk -> released across the link, p50 / p99 (DDS source timestamps, one machine's
  clock), and the same graph on loopback for the added latency;
* link drops of 2 s and 30 s (`--episodes` each; 10 by default, 2 quick): how long until the
  tool held still, chunks the shield refused as stale after the link came back, how long
  until the next release (the graph recovers without a restart), and whether `carryon
  status` on the robot side named the policy node unreachable during the drop.
"""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from carryon_bench.core.bench import BENCHMARKS, Benchmark, BenchOptions, BenchResult, free_port, percentile
from carryon_bringup import netns
from carryon_bringup.core.graph import GraphSpec
from carryon_bringup.core.link_drop import DropFigures, figures
from carryon_bringup.graph_run import GraphRun
from carryon_bringup.up import load_spec

# The robot PC: the driver (the simulator), perception, the shield, the judge, recovery,
# memory and the planner; the GPU box: the policy node beside its policy server, and the
# planner's model server.
ROBOT_NODES = (
    "memory_node",
    "planner_node",
    "sim_node",
    "perception_node",
    "shield_node",
    "judge_node",
    "recovery_node",
)
GPU_NODES = ("policy_node",)
MODEL_PORT = 8421  # llm_server_node's
# The model server's reply to any request (a stand-in model: the plan of a question, no motion).
MODEL_REPLY = json.dumps({"reply": "served from the GPU box", "memory_operations": []})  # a full plan or a step plan
MOVING_S = 40.0  # the probe's start (first trial) or the goal running, a reset, the first release: at most
SETTLE_S = 12.0
# Steps per goal in the drop trials: a goal outlasts the second between the first release
# after a reset and the drop, so the link drops in the middle of a goal (48 steps ran out
# before the drop in half the trials; the next goal's request then went out on a dead link).
GOAL_STEPS = 400  # after each restore: the next release, stale refusals, the tool moving again


@contextlib.contextmanager
def split_graph(spec: GraphSpec, run_dir: Path, hosts: netns.TwoHosts | None) -> Iterator[tuple[GraphRun, GraphRun]]:
    """The robot side and the GPU side of the graph, ready; on `hosts`, or both on this
    machine's loopback when `hosts` is None (the baseline). The GPU side is the policy node
    with the openpi_remote backend and an openpi-protocol server beside it (the fake one: it
    moves the tool 2 mm along +x per step, whatever it sees), as a VLA served on a GPU box."""
    port = 8000 if hosts is not None else free_port()  # a namespace's loopback is its own
    server_cmd = [sys.executable, "-m", "carryon_sim.harness.fakes.openpi_server", "--port", str(port)]
    sets = ["policy_node.backend=openpi_remote", f"policy_node.remote_uri=ws://127.0.0.1:{port}"]
    # The planner's model server on the GPU box, reached across the link over HTTP: a stub
    # OpenAI-compatible server (scripted reply) where llm_server_node would run the model.
    model_port = MODEL_PORT if hosts is not None else free_port()
    model_host = hosts.gpu.address if hosts is not None else "127.0.0.1"
    model_cmd = [sys.executable, "-m", "carryon_sim.harness.fakes.openai_server", "--port", str(model_port)]
    model_cmd += ["--host", "0.0.0.0", "--default", MODEL_REPLY]  # the GPU box: every interface of its namespace
    planner = ["planner_node.llm_backend=local", f"planner_node.llm_local_url=http://{model_host}:{model_port}/v1"]
    robot = GraphRun(spec, run_dir / "robot", only=ROBOT_NODES, extra_args=[a for s in planner for a in ("--set", s)])
    gpu = GraphRun(
        spec,
        run_dir / "gpu",
        only=GPU_NODES,
        domain_id=robot.domain_id,
        extra_args=[a for s in sets for a in ("--set", s)],
    )
    if hosts is not None:
        for graph, host in ((robot, hosts.robot), (gpu, hosts.gpu)):
            graph.env = hosts.env(host, graph.env, spec.config_dir)
            graph.command = host.command(graph.command)
        server_cmd = hosts.gpu.command(server_cmd)
        model_cmd = hosts.gpu.command(model_cmd)
    servers: list[subprocess.Popen[bytes]] = []
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        servers.append(_start_server(server_cmd, "fake openpi server on", run_dir / "policy_server.log"))
        servers.append(_start_server(model_cmd, "stub VLM at", run_dir / "model_server.log"))
        with robot, gpu:
            robot.wait_ready(timeout_s=120.0)
            gpu.wait_ready(timeout_s=120.0)
            yield robot, gpu
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=10)


def _start_server(command: list[str], says: str, log: Path) -> subprocess.Popen[bytes]:
    """A server process, its output in `log`, once it printed `says` (it listens)."""
    with log.open("wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30.0
    while says not in log.read_text(errors="replace"):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            server.wait()
            raise RuntimeError(f"{command[2:4]} did not start: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.1)
    return server


def robot_side(hosts: netns.TwoHosts | None, argv: Sequence[str]) -> list[str]:
    return hosts.robot.command(argv) if hosts is not None else list(argv)


def chunk_latency(hosts: netns.TwoHosts | None, robot: GraphRun, steps: int) -> list[float]:
    """policy/chunk -> shield/chunk of each released chunk, ms (carryon bench latency's probe)."""
    probe = [sys.executable, "-m", "carryon_bench.latency_probe", "--steps", str(steps), "--calls", "0"]
    done = subprocess.run(
        robot_side(hosts, probe), env=robot.env, capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"latency probe failed:\n{done.stderr[-3000:]}")
    return [float(v) for v in json.loads(done.stdout)["policy_to_released_ms"]]


def status_during(hosts: netns.TwoHosts, robot: GraphRun, into: dict[str, Any]) -> threading.Thread:
    """`carryon status --json` on the robot side, in a thread (it waits for nodes that do not answer)."""
    command = [sys.executable, "-m", "carryon_bringup.cli", "status", "--json", "--timeout", "3"]

    def ask() -> None:
        done = subprocess.run(
            robot_side(hosts, command), env=robot.env, capture_output=True, text=True, timeout=60, check=False
        )
        text = done.stdout
        into.update(json.loads(text[text.find("{") : text.rfind("}") + 1] or "{}"))

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    return thread


def drop_trials(
    hosts: netns.TwoHosts, robot: GraphRun, drops: Sequence[float], lead_s: float = 1.0, settle_s: float = SETTLE_S
) -> list[tuple[DropFigures, bool]]:
    """Each drop in turn while policy goals run back to back, `lead_s` after the first chunk
    released after a reset; the figures of each, and whether `carryon status` on the robot
    side showed the policy node down during it."""
    signals = robot.run_dir / f"link_probe_{time.monotonic_ns()}"
    signals.mkdir()
    duration = sum(MOVING_S + d + settle_s for d in drops)
    probe_cmd = [sys.executable, "-m", "carryon_bench.link_probe", "--duration-s", f"{duration:.0f}"]
    probe_cmd += ["--steps", str(GOAL_STEPS)]
    probe_cmd += ["--signal-dir", str(signals)]
    probe_log = signals / "link_probe.err"  # a file: a pipe nobody reads until the end could fill and block it
    with probe_log.open("w") as errors:
        probe = subprocess.Popen(
            robot_side(hosts, probe_cmd), env=robot.env, stdout=subprocess.PIPE, stderr=errors, text=True
        )
    marks: list[tuple[float, float, dict[str, Any]]] = []
    try:
        for drop in drops:
            (signals / "moving").unlink(missing_ok=True)
            (signals / "reset").touch()
            deadline = time.monotonic() + MOVING_S
            while not (signals / "moving").exists():  # reset, and a chunk released since: the arm moves
                if time.monotonic() > deadline or probe.poll() is not None:
                    probe.terminate()  # the probe prints what it saw when stopped
                    out, _ = probe.communicate(timeout=30)
                    raise RuntimeError(
                        f"no chunk released within {MOVING_S:.0f} s of a reset; the link probe's output:\n"
                        f"{out[-3000:]}\n{probe_log.read_text()[-3000:]}"
                    )
                time.sleep(0.05)
            time.sleep(lead_s)
            status: dict[str, Any] = {}
            down_at = time.time()
            hosts.set_link(False)
            took_s = time.time() - down_at  # `ip` itself
            asking = status_during(hosts, robot, status)
            time.sleep(max(0.0, down_at + drop - time.time()))
            hosts.set_link(True)
            marks.append((down_at, time.time(), status))
            up_after = marks[-1][1] - down_at
            print(
                f"link down for {drop:.0f} s: back up after {up_after:.2f} s (down took {took_s:.2f} s)",
                file=sys.stderr,
            )
            time.sleep(settle_s)
            if asking is not None:
                asking.join(timeout=30.0)
        probe.terminate()  # the trials are done: the probe prints what it saw and exits
        out, _ = probe.communicate(timeout=60)
    finally:
        hosts.set_link(True)
        if probe.poll() is None:
            probe.kill()
            probe.wait()
    if probe.returncode != 0 or not out.strip():
        raise RuntimeError(f"link probe failed ({probe.returncode}):\n{probe_log.read_text()[-3000:]}")
    timelines = json.loads(out)
    # What the robot side saw (releases, decisions, poses, each goal and how it ended) beside
    # the drops, wall-clock seconds, kept with the run for a closer look at any trial.
    timelines["drops"] = [[down, up] for down, up, _ in marks]
    (signals / "timelines.json").write_text(json.dumps(timelines))
    return [
        (figures(timelines, down, up), status.get("policy_node", "?") is None and bool(status.get("sim_node")))
        for down, up, status in marks
    ]


def _summary(values: Sequence[float | None]) -> tuple[float, float, int]:
    """p50, max over the trials that have a value, and how many lack one."""
    known = [v for v in values if v is not None]
    if not known:
        return math.nan, math.nan, len(values)
    return percentile(known, 50), max(known), len(values) - len(known)


def run(options: BenchOptions) -> BenchResult:
    reason = netns.unavailable()
    if reason is not None:
        raise RuntimeError(f"carryon bench hosts needs two network namespaces: {reason}")
    spec = load_spec(str(options.config_dir) if options.config_dir else None)
    result = BenchResult("hosts", options.quick, options.seed)
    trials = options.count(10, 2)
    steps = 48 if options.quick else 400
    with split_graph(spec, options.run_dir / "loopback", None) as (robot, _gpu):
        loopback = chunk_latency(None, robot, steps)
    with netns.TwoHosts() as hosts, split_graph(spec, options.run_dir / "split", hosts) as (robot, _gpu):
        across = chunk_latency(hosts, robot, steps)
        rows = {drop: drop_trials(hosts, robot, [drop] * trials) for drop in (2.0, 30.0)}
    for name, values in (("loopback", loopback), ("across_link", across)):
        if values:
            result.add(f"policy_to_released_{name}_p50", percentile(values, 50), "ms", f"{len(values)} chunks")
            result.add(f"policy_to_released_{name}_p99", percentile(values, 99), "ms")
    if loopback and across:
        added = percentile(across, 50) - percentile(loopback, 50)
        result.add("added_by_link_p50", added, "ms", "across the link minus loopback, p50")
    for drop, outcomes in rows.items():
        label = f"drop_{drop:.0f}s"
        found = [f for f, _ in outcomes]
        moving = [f for f in found if f.moving_at_drop]
        hold = _summary([f.hold_s for f in moving])
        resume = _summary([f.resume_s for f in found])
        note = f"drop to tool still, in the {len(moving)} of {len(found)} trials where it moved; max {hold[1]:.2f} s"
        result.add(f"{label}_hold_p50", hold[0], "s", note)
        note = f"restore to next release; max {resume[1]:.2f} s, {resume[2]} trials without one"
        result.add(f"{label}_resume_p50", resume[0], "s", note)
        result.add(f"{label}_refused_stale", sum(f.refused_stale for f in found), "chunks", "in all trials")
        result.add(f"{label}_status_named_policy_down", sum(ok for _, ok in outcomes), "trials", f"of {len(found)}")
    result.details["trials"] = {f"{d:.0f}": [vars(f) | {"status_ok": ok} for f, ok in o] for d, o in rows.items()}
    result.details["latency_ms"] = {"loopback": loopback, "across_link": across}
    return result


BENCHMARKS.register(
    "hosts",
    Benchmark("hosts", "graph split over two network namespaces: chunk latency across the link, link drops", run),
)
