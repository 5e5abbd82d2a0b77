"""`carryon bench graph`: start-up, service round trip and shutdown of the whole graph.

Starts `carryon up --profile sim` as separate processes on a private ROS domain,
measures the time until every node reports ready, GetStatus and memory service round
trips through DDS, and the time Ctrl-C (SIGINT) takes to stop everything; then checks
that no node process and no DDS shared-memory file was left behind.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import psutil

from carryon_bench.core.bench import BENCHMARKS, Benchmark, BenchOptions, BenchResult, percentile
from carryon_bringup.core import shm
from carryon_bringup.graph_run import GraphRun
from carryon_bringup.up import load_spec


def _round_trips(graph: GraphRun, namespace: str, calls: int) -> dict[str, list[float]]:
    command = [sys.executable, "-m", "carryon_bench.rtt", "--namespace", namespace, "--calls", str(calls)]
    result = subprocess.run(command, env=graph.env, capture_output=True, text=True, timeout=300, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"round-trip client failed:\n{result.stderr}")
    samples: dict[str, list[float]] = json.loads(result.stdout)
    return samples


def run(options: BenchOptions) -> BenchResult:
    spec = load_spec(None)
    result = BenchResult("graph", options.quick, options.seed)
    rounds = 1 if options.quick else 3
    calls = 50 if options.quick else 300
    ready_s: list[float] = []
    stop_s: list[float] = []
    status_ms: list[float] = []
    context_ms: list[float] = []
    leftovers = shm_left = 0
    nodes = 0
    for index in range(rounds):
        graph = GraphRun(spec, options.run_dir / f"round{index}")
        nodes = len(graph.node_names)
        with graph:
            ready_s.append(graph.wait_ready(timeout_s=60.0))
            pids = graph.node_pids()
            samples = _round_trips(graph, spec.namespace, calls)
            status_ms += samples["status_ms"]
            context_ms += samples["context_ms"]
            stop_s.append(graph.stop(signal.SIGINT))
        leftovers += sum(1 for pid in pids.values() if psutil.pid_exists(pid))
        shm_left += len(graph.new_shm_files() - shm.files_in_use())
    result.add("nodes", nodes, "processes")
    result.add("ready_max", max(ready_s), "s", f"launch -> all {nodes} nodes ready, worst of {rounds}")
    result.add("ready_median", percentile(ready_s, 50), "s")
    result.add("status_rtt_p50", percentile(status_ms, 50), "ms", f"GetStatus via DDS, {len(status_ms)} calls")
    result.add("status_rtt_p99", percentile(status_ms, 99), "ms")
    result.add("memory_rtt_p50", percentile(context_ms, 50), "ms", f"memory/get_context, {len(context_ms)} calls")
    result.add("stop_max", max(stop_s), "s", f"SIGINT -> launcher exited, worst of {rounds}")
    result.add("leftover_processes", leftovers, "count")
    result.add("leftover_shm_files", shm_left, "count")
    result.details.update(ready_s=ready_s, stop_s=stop_s)
    return result


BENCHMARKS.register(
    "graph",
    Benchmark("graph", "start-up, DDS service round trip and clean shutdown of `carryon up --profile sim`", run),
)
