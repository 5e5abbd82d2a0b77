"""`carryon bench personalization`: backend from planner_node's config plus --set, a run
against the stub server writes per-suite accuracy and a case log."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from carryon_bench.core.bench import BenchOptions
from carryon_bench.node_config import node_config
from carryon_bench.personalization import run
from carryon_common.core.errors import ConfigError
from carryon_planner.core.config import PlannerConfig
from carryon_sim.harness.fakes.openai_server import StubVlmServer

CONFIG = Path(__file__).resolve().parents[2] / "config"
OWN = ("personalization",)  # the project's own suite set (6 suites)


def planner_config(sets: tuple[str, ...]) -> PlannerConfig:
    options = BenchOptions(quick=True, seed=0, run_dir=Path("unused"), sets=sets, config_dir=CONFIG)
    return node_config(options, PlannerConfig, "planner_node")


def test_the_backend_comes_from_planner_node_config_and_set() -> None:
    assert planner_config(()).llm_backend == "local"
    config = planner_config(("planner_node.llm_backend=openai", "planner_node.max_repairs=0"))
    assert config.llm_backend == "openai" and config.max_repairs == 0
    with pytest.raises(ConfigError, match="only uses planner_node"):
        planner_config(("shield_node.enabled=false",))
    with pytest.raises(ConfigError, match="llm_backend"):
        planner_config(("planner_node.llm_backend=gpt",))


def test_the_shield_benchmarks_read_shield_node_yaml(tmp_path: Path) -> None:
    from carryon_shield.core.config import ShieldConfig

    (tmp_path / "graph.yaml").write_text((CONFIG / "graph.yaml").read_text())
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    (nodes / "shield_node.yaml").write_text("/**:\n  ros__parameters:\n    hand_threshold_m: 0.07\n")
    options = BenchOptions(quick=True, seed=0, run_dir=tmp_path, sets=("shield_node.finger_threshold_m=0.02",),
                           config_dir=tmp_path)  # fmt: skip
    config = node_config(options, ShieldConfig, "shield_node")
    assert (config.hand_threshold_m, config.finger_threshold_m) == (0.07, 0.02)


REFUSAL = json.dumps({"reply": "No.", "subtasks": [], "refusal": "I will not do anything."})


def stub_planner(stub: StubVlmServer) -> tuple[str, ...]:
    """planner_node set to plan with the stub server, without LLM repair rounds."""
    return ("planner_node.llm_backend=openai", f"planner_node.llm_base_url={stub.base_url}",
            "planner_node.llm_model=stub", "planner_node.max_repairs=0")  # fmt: skip


def test_a_quick_run_against_the_stub_scores_every_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    with StubVlmServer([REFUSAL] * 6) as stub:
        sets = stub_planner(stub)
        result = run(BenchOptions(True, 0, tmp_path / "run", sets, CONFIG, suites=OWN))
    metrics = {m.name: m.value for m in result.metrics}
    assert {f"{s}_accuracy" for s in ("sandwich_preferences", "covered_ingredients")} <= set(metrics)
    assert metrics["all_accuracy"] < 50.0  # refusing everything must not score well
    assert metrics["forbidden_dispatches"] == 0 and result.details["forbidden_dispatched"] == []
    assert metrics["llm_repair_rounds"] == 0 and metrics["deterministic_repairs"] == 0  # a refusal needs neither
    assert metrics["plan_time_p99"] >= metrics["plan_time_p50"]
    lines = (tmp_path / "run" / "cases.jsonl").read_text().splitlines()
    assert len(lines) == 6 and all(json.loads(line)["refused"] for line in lines)
    assert all(json.loads(line)["replies"] == [REFUSAL] for line in lines)  # the model's own words, for reading
    assert result.details["backend"].startswith("openai:stub")
    assert (tmp_path / "run" / "personalization.png").stat().st_size > 0
    # A resumed run plans nothing again: every case is in rows/ (the stub would have no replies left).
    with StubVlmServer([]) as stub:
        sets = stub_planner(stub)
        again = run(BenchOptions(True, 0, tmp_path / "run", sets, CONFIG, suites=OWN))
    assert not stub.requests and {m.name: m.value for m in again.metrics} == metrics


def test_episodes_sets_the_cases_per_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    with StubVlmServer([REFUSAL] * 12) as stub:
        sets = stub_planner(stub)
        run(BenchOptions(False, 0, tmp_path / "run", sets, CONFIG, episodes=2, suites=OWN))
    cases = [json.loads(line) for line in (tmp_path / "run" / "cases.jsonl").read_text().splitlines()]
    assert len(cases) == 12 and len(stub.requests) == 12
    assert all(sum(c["suite"] == suite for c in cases) == 2 for suite in {c["suite"] for c in cases})


SUITE = """
name: {name}
description: one case
library:
  - {{instruction: put the {food} in the bowl}}
scene:
  shelf: [{food}, bowl]
users:
  {user}: {{allergy: {{food: sesame}}}}
cases:
  - id: one
    user: {user}
    request: Bring me a snack
    expect:
      ask: [{food}]
"""


def suite_folders(root: Path, own: dict[str, str], general: dict[str, str]) -> Path:
    for folder, suites in (("personalization", own), ("generalization", general)):
        if suites:
            (root / "planner" / folder).mkdir(parents=True)
        for name, food in suites.items():
            text = SUITE.format(name=name, food=food, user="ines")
            (root / "planner" / folder / f"{name}.yaml").write_text(text)
    return root


def test_suites_come_from_both_sets_and_can_be_chosen_by_set_or_name(tmp_path: Path) -> None:
    from carryon_bench.personalization import select_suites

    root = suite_folders(tmp_path, {"own_a": "tahini", "own_b": "halva"}, {"gen_a": "dukkah"})
    assert [(s, x.name) for s, x in select_suites(root)] == [
        ("personalization", "own_a"), ("personalization", "own_b"), ("generalization", "gen_a")
    ]  # fmt: skip
    assert [x.name for _, x in select_suites(root, ("generalization",))] == ["gen_a"]
    assert [x.name for _, x in select_suites(root, ("own_b", "gen_a"))] == ["own_b", "gen_a"]
    with pytest.raises(ConfigError, match="unknown"):
        select_suites(root, ("nonesuch",))
    clash = suite_folders(tmp_path / "clash", {"same": "tahini"}, {"same": "dukkah"})
    with pytest.raises(ConfigError, match="more than one set"):
        select_suites(clash)


def test_questions_are_scored_per_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A case that expects a question about an object of unknown kind: a refusal that asks
    nothing misses it, and the bench counts it (right questions 0 of 1 expected)."""
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    root = suite_folders(tmp_path / "config", {}, {"gen_a": "dukkah"})
    shutil.copytree(CONFIG / "nodes", root / "nodes")
    for name in ("graph.yaml", "planner/preferences.yaml"):
        shutil.copy(CONFIG / name, root / name)
    with StubVlmServer([REFUSAL]) as stub:
        result = run(BenchOptions(True, 0, tmp_path / "run", stub_planner(stub), root))
    metrics = {m.name: m.value for m in result.metrics}
    assert metrics["gen_a_accuracy"] == 0.0 and metrics["generalization_accuracy"] == 0.0
    assert (metrics["gen_a_questions_right"], metrics["gen_a_questions_knowable"]) == (0, 0)
    notes = {m.name: m.note for m in result.metrics}
    assert "1 expected" in notes["gen_a_questions_right"]
    case = json.loads((tmp_path / "run" / "cases.jsonl").read_text().splitlines()[0])
    assert "did not ask about 'dukkah'" in case["failures"]
