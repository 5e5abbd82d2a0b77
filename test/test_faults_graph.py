"""`carryon bench faults` in its short form, against sim_node and shield_node in their own
processes: the e-stop and a frozen shield stop the moving arm; forged, foreign-key and
replayed chunks on shield/chunk and forged releases on estop/state move nothing; a shield
killed with SIGKILL comes back engaged and releases nothing until the operator does;
`carryon policy run` exits (code 3, the goal lost) when policy_node is killed, even though
its restart policy brings a new one, and SIGTERM to it cancels the goal (code 130).
(The stop and exit times are the benchmark's to report, not this test's to bound.)"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from carryon_bringup.bench.faults import run
from carryon_bringup.core.bench import BenchOptions

pytestmark = pytest.mark.graph


def test_the_fault_probes_hold_against_the_running_graph(config_dir: Path, tmp_path: Path) -> None:
    result = run(BenchOptions(quick=True, seed=0, run_dir=tmp_path, config_dir=config_dir, episodes=2))
    metrics = {m.name: m for m in result.metrics}
    assert all(math.isfinite(s) for s in result.details["estop_to_rest_s"]), result.details
    assert all(math.isfinite(s) for s in result.details["shield_frozen_to_rest_s"]), result.details
    assert len(result.details["estop_to_rest_s"]) == 2
    assert metrics["forged_chunks_executed"].value == 0 and metrics["forged_chunks_executed"].note.startswith("of 6")
    assert metrics["forged_release_moved"].value == 0
    assert metrics["estop_survived_restart"].value == 2, metrics["estop_survived_restart"]
    cli = result.details["cli"]
    assert all(math.isfinite(s) for s in cli["death_exit_s"] + cli["sigterm_exit_s"]), cli
    assert cli["death_codes"] == [3.0, 3.0] and cli["sigterm_codes"] == [130.0, 130.0], cli
    assert cli["chunks_after_sigterm"] == [0.0, 0.0], cli
