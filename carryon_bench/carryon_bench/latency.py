"""`carryon bench latency`: p50 / p99 of each stage of the running graph (separate
processes over DDS, the simulator at real time):

* policy inference (the backend's own time, `policy/timing`);
* policy -> shield -> driver: from a chunk written on `policy/chunk` to its release written
  on `shield/chunk` (what the driver receives), by DDS's source timestamps;
* the shield node's decision on one chunk (`ShieldEvent.compute_time_s`: the check on the
  obstacle set its grounding worker made from the newest frames, and publishing the release;
  grounding itself only when no usable set is ready: a new task, the grasp);
* the judge: a `judge/judge` round trip on the cameras (the configured backend);
* the planner: an `Ask` round trip with the scripted replies, i.e. context, validation
  and DDS without the LLM (the LLM's own time is in `carryon bench personalization`).

The policy is the scripted stand-in; 800 steps (48 with --quick) of "open the pink cover".
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

from carryon_bench.core.bench import BENCHMARKS, Benchmark, BenchOptions, BenchResult, percentile
from carryon_bench.plots import bar_chart
from carryon_bringup.graph_run import GraphRun
from carryon_bringup.up import load_spec

NODES = ["memory_node", "planner_node", "policy_node", "perception_node", "shield_node", "judge_node", "sim_node"]


def run(options: BenchOptions) -> BenchResult:
    spec = load_spec(str(options.config_dir) if options.config_dir else None)
    result = BenchResult("latency", options.quick, options.seed)
    # 800 steps: about 100 chunks, so that p99 is not simply the largest of 25 samples.
    steps, calls = (48, 5) if options.quick else (800, 100)
    sets = ["planner_node.llm_backend=scripted", f"memory_node.memory_dir={(options.run_dir / 'memory').resolve()}"]
    sets += list(options.sets)
    with GraphRun(
        spec, options.run_dir / "graph", only=NODES, extra_args=[a for s in sets for a in ("--set", s)]
    ) as graph:
        graph.wait_ready(timeout_s=120.0)
        command = [
            sys.executable,
            "-m",
            "carryon_bench.latency_probe",
            "--namespace",
            spec.namespace,
            "--steps",
            str(steps),
            "--calls",
            str(calls),
        ]
        done = subprocess.run(command, env=graph.env, capture_output=True, text=True, timeout=900, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"latency probe failed:\n{done.stderr}")
    samples: dict[str, Any] = json.loads(done.stdout)
    stages = (
        ("policy_infer", "policy_infer_ms", "inference of the scripted stand-in (policy/timing)"),
        ("policy_to_released", "policy_to_released_ms", "policy/chunk -> shield/chunk, DDS source timestamps"),
        ("shield_decision", "shield_compute_ms", "ShieldEvent.compute_time_s: check on a ready obstacle set, release"),
        ("judge", "judge_ms", f"judge/judge round trip ({samples.get('judge_backend', '?')} backend)"),
        ("planner_ask", "planner_ms", "Ask round trip, scripted replies (no LLM time)"),
    )
    plotted: dict[str, list[float]] = {"p50": [], "p99": []}
    for name, key, note in stages:
        values = samples.get(key) or []
        p50, p99 = (percentile(values, 50), percentile(values, 99)) if values else (math.nan, math.nan)
        plotted["p50"].append(p50)
        plotted["p99"].append(p99)
        if not values:
            result.add(f"{name}_p50", math.nan, "ms", f"no samples: {note}")
            continue
        result.add(f"{name}_p50", p50, "ms", f"{note}; {len(values)} samples")
        result.add(f"{name}_p99", p99, "ms")
    bar_chart(
        options.run_dir / "latency.png", "latency per stage (p50, p99)", [s[0] for s in stages], plotted, unit="ms"
    )
    refused = samples.get("refused") or []
    why = "; ".join(sorted(set(refused)))[:300]
    result.add(
        "chunks_released",
        samples.get("released_chunks", 0),
        "chunks",
        f"of {samples.get('chunks', 0)}" + (f"; refused: {why}" if why else ""),
    )
    result.details["samples"] = samples
    return result


BENCHMARKS.register(
    "latency",
    Benchmark("latency", "per-stage p50/p99: policy -> shield -> driver, shield, judge, planner", run),
)
