"""`carryon bench personalization`: backend from planner_node's config plus --set, a run
against the stub server writes per-suite accuracy and a case log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from carryon_bringup.bench.personalization import planner_config, run
from carryon_bringup.core.bench import BenchOptions
from carryon_common.core.errors import ConfigError
from carryon_sim.harness.fakes.openai_server import StubVlmServer

CONFIG = Path(__file__).resolve().parents[2] / "config"


def test_the_backend_comes_from_planner_node_config_and_set() -> None:
    assert planner_config(CONFIG, ()).llm_backend == "local"
    config = planner_config(CONFIG, ("planner_node.llm_backend=openai", "planner_node.max_repairs=0"))
    assert config.llm_backend == "openai" and config.max_repairs == 0
    with pytest.raises(ConfigError, match="only uses planner_node"):
        planner_config(CONFIG, ("shield_node.enabled=false",))
    with pytest.raises(ConfigError, match="llm_backend"):
        planner_config(CONFIG, ("planner_node.llm_backend=gpt",))


def test_a_quick_run_against_the_stub_scores_every_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    refusal = json.dumps({"reply": "No.", "subtasks": [], "refusal": "I will not do anything."})
    with StubVlmServer([refusal] * 6) as stub:
        sets = ("planner_node.llm_backend=openai", f"planner_node.llm_base_url={stub.base_url}",
                "planner_node.llm_model=stub", "planner_node.max_repairs=0")  # fmt: skip
        result = run(BenchOptions(True, 0, tmp_path / "run", sets, CONFIG))
    metrics = {m.name: m.value for m in result.metrics}
    assert {f"{s}_accuracy" for s in ("sandwich_preferences", "covered_ingredients")} <= set(metrics)
    assert metrics["all_accuracy"] < 50.0  # refusing everything must not score well
    lines = (tmp_path / "run" / "cases.jsonl").read_text().splitlines()
    assert len(lines) == 6 and all(json.loads(line)["refused"] for line in lines)
    assert result.details["backend"].startswith("openai:stub")
    assert (tmp_path / "run" / "personalization.png").stat().st_size > 0
    # A resumed run plans nothing again: every case is in rows/ (the stub would have no replies left).
    with StubVlmServer([]) as stub:
        sets = ("planner_node.llm_backend=openai", f"planner_node.llm_base_url={stub.base_url}",
                "planner_node.llm_model=stub", "planner_node.max_repairs=0")  # fmt: skip
        again = run(BenchOptions(True, 0, tmp_path / "run", sets, CONFIG))
    assert not stub.requests and {m.name: m.value for m in again.metrics} == metrics
