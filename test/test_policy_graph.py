"""policy_node and sim_node as separate processes over real DDS: a RunPolicy goal makes a
stream of chunks stamped with the simulator's clock, with the timing of each inference."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from carryon_bringup.core.graph import GraphSpec
from carryon_bringup.graph_run import GraphRun

pytestmark = pytest.mark.graph


def probe(graph: GraphRun, namespace: str, instruction: str, steps: int) -> tuple[int, dict]:  # type: ignore[type-arg]
    command = [
        sys.executable, "-m", "carryon_bench.chunk_stream", "--namespace", namespace,
        "--instruction", instruction, "--steps", str(steps),
    ]  # fmt: skip
    done = subprocess.run(command, env=graph.env, capture_output=True, text=True, timeout=180, check=False)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_run_policy_streams_chunks_on_sim_time(config_dir: Path, tmp_path: Path) -> None:
    spec = GraphSpec.load(config_dir)
    # A simulator stalled a few seconds by the rest of a full test run must not end the goal:
    # this test is about pacing on sim time, not the stopped-clock safeguard (default 5 s).
    patient = ["--set", "policy_node.observation_timeout_s=20"]
    with GraphRun(spec, tmp_path / "run", only=["sim_node", "policy_node"], extra_args=patient) as graph:
        graph.wait_ready(timeout_s=90.0)
        code, stream = probe(graph, spec.namespace, "open the pink cover", steps=80)
        assert code == 0, stream["message"]
        # 80 steps, 8 executed per inference: 10 chunks, one every 0.4 s of simulated time.
        assert len(stream["stamps"]) == 10 and len(stream["infer_s"]) == 10
        # Paced on the simulator's clock: each inference starts once the simulator's clock has
        # passed the previous one's start plus 8 steps (0.4 s), whatever the load, so the ten
        # chunks span at least 3.6 s of sim time, less the first inference's own duration (each
        # chunk is stamped after its inference) and one 50 ms tick. A node paced on the wall
        # clock would span less whenever the simulator runs slower than real time. Single
        # intervals jitter with the load (0.15 to 0.95 s apart in one full run); a node that
        # waited a period too many would send chunks 0.8 s apart: the median stays below.
        intervals = np.diff(stream["stamps"])
        span = stream["stamps"][-1] - stream["stamps"][0] + stream["infer_s"][0]
        assert span >= 3.6 - 0.05, (span, intervals)
        assert np.median(intervals) < 0.8, intervals

        code, refused = probe(graph, spec.namespace, "juggle the knives", steps=10)
        assert code == 1 and "unknown instruction 'juggle the knives'" in refused["message"]
        assert "'put the carrot in the bowl'" in refused["message"] and refused["stamps"] == []

        # The operator's way: `carryon policy run`.
        cli = [sys.executable, "-m", "carryon_bringup.cli", "--config-dir", str(config_dir), "policy", "run"]
        env = {**graph.env, "NO_COLOR": "1"}
        done = subprocess.run([*cli, "put the carrot in the bowl", "--steps", "16"], env=env, capture_output=True,
                              text=True, timeout=120, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "budget spent" in done.stdout and "16 steps, 2 chunks" in done.stdout
        done = subprocess.run([*cli, "juggle the knives"], env=env, capture_output=True, text=True, timeout=120,
                              check=False)  # fmt: skip
        assert done.returncode == 1 and "refused: unknown instruction" in done.stderr
