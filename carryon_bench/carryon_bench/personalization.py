"""`carryon bench personalization`: plan dispatch accuracy per suite (paper §4.1).

The suites are `config/planner/personalization/*.yaml` (sandwich preferences across
users, packing by activity with and without habits, preference update, profile
isolation, covered ingredients with remembered / no / stale memory, relocation
correction). Each case is planned the way planner_node plans an Ask — same context
builder, validator and repair loop — with the LLM backend planner_node is configured
with (config/nodes/planner_node.yaml, overridable with `--set planner_node.KEY=VALUE`),
and scored on what would be dispatched (see carryon_bench.core.personalization_score).

    carryon bench personalization                       # the configured backend (local by default:
                                                        # the model server, started for the run)
    carryon bench personalization --set planner_node.llm_backend=openai \\
        --set planner_node.llm_base_url=http://127.0.0.1:8080/v1 --set planner_node.llm_model=NAME
    carryon bench personalization --quick               # the first case of each suite
    carryon bench personalization --episodes 4          # the first 4 cases of each suite

Per case the run folder's `cases.jsonl` records the dispatched subtasks, the reply, the
failed expectations, the LLM rounds, each round's raw answer and the time; each case is also saved under `rows/`
as it finishes, so `--resume RUN_DIR` continues an interrupted run.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from carryon_bench.core.bench import BENCHMARKS, Benchmark, BenchOptions, BenchResult, percentile, saved_row
from carryon_bench.core.personalization_score import (
    Case,
    CaseResult,
    Expect,
    Suite,
    accuracy,
    forbidden_dispatches,
    load_suites,
    run_case,
)
from carryon_bench.llm_serving import local_model_server
from carryon_bench.node_config import node_config
from carryon_bench.plots import bar_chart
from carryon_bringup.core.graph import find_config_dir
from carryon_bringup.up import default_config_fallbacks
from carryon_common.core.errors import ConfigError
from carryon_common.core.llm_backends import make_llm
from carryon_common.core.openai_client import OpenAiClient
from carryon_planner.core.config import PlannerConfig
from carryon_planner.core.context import warm_up_messages
from carryon_planner.core.facts import load_preference_rules
from carryon_planner.core.knowledge import load_food_knowledge
from carryon_planner.core.learned_kinds import LearnedKinds

# The suite sets, each a folder of the config dir: the project's own suites, and the
# generalization suites (foods, users, places and wording that appear in no other file).
SUITE_SETS = {
    "personalization": Path("planner") / "personalization",
    "generalization": Path("planner") / "generalization",
}


def select_suites(config_dir: Path, wanted: tuple[str, ...] = ()) -> list[tuple[str, Suite]]:
    """(set, suite) for every suite of the sets in `config_dir` (a set whose folder is
    missing is skipped, unless asked for by name), or those `wanted` names: a set or a suite."""
    found: list[tuple[str, Suite]] = []
    for set_name, folder in SUITE_SETS.items():
        if (config_dir / folder).is_dir() or set_name in wanted:
            found += [(set_name, suite) for suite in load_suites(config_dir / folder)]
    names = [suite.name for _, suite in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"suite name(s) {twice} used in more than one set: each suite needs a name of its own")
    unknown = set(wanted) - set(SUITE_SETS) - set(names)
    if unknown:
        raise ConfigError(f"--suites: unknown {sorted(unknown)}; sets: {sorted(SUITE_SETS)}; suites: {names}")
    if wanted:
        found = [(set_name, suite) for set_name, suite in found if set_name in wanted or suite.name in wanted]
    return found


def run(options: BenchOptions) -> BenchResult:
    config = node_config(options, PlannerConfig, "planner_node")
    # llm_backend local: llm_server_node's server, started for this run (logs in the run folder).
    with local_model_server(config, options.run_dir / "llm_server.log") as served:
        return _run(options, served)


def _run(options: BenchOptions, config: PlannerConfig) -> BenchResult:
    config_dir = find_config_dir(options.config_dir, default_config_fallbacks())
    chosen = select_suites(config_dir, options.suites)
    suites = [suite for _, suite in chosen]
    set_of = {suite.name: set_name for set_name, suite in chosen}
    rules = load_preference_rules(config_dir / "planner" / "preferences.yaml")
    # The food knowledge planner_node loads (its food_knowledge_file, else the config dir's).
    knowledge_file = Path(config.food_knowledge_file) if config.food_knowledge_file else None
    knowledge_file = knowledge_file or config_dir / "planner" / "food_knowledge.yaml"
    knowledge = load_food_knowledge(knowledge_file) if knowledge_file.is_file() else None
    llm = make_llm(config)
    result = BenchResult("personalization", options.quick, options.seed)
    result.details["backend"] = llm.name
    if config.llm_backend == "local" and isinstance(llm, OpenAiClient):
        # As planner_node does at start-up: the server reads the rules and schema once, ahead of the cases.
        started = time.monotonic()
        llm.warm_up(warm_up_messages(config.plans_in_steps), timeout_s=600.0)
        result.add("warm_up_s", time.monotonic() - started, "s", "the model server reads the rules and schema once")
    result.details["max_repairs"] = config.max_repairs
    result.details["food_knowledge"] = str(knowledge_file) if knowledge is not None else "none"
    result.details["plan_format"] = "steps" if config.plans_in_steps else "full"
    # Names the taxonomy does not know, asked of the LLM as planner_node would (classify_unknown_names).
    learned = None
    if config.classify_unknown_names:
        learned = LearnedKinds(Path(config.learned_kinds_file or options.run_dir / "learned_kinds.json"))
    result.details["classify_unknown_names"] = config.classify_unknown_names
    options.run_dir.mkdir(parents=True, exist_ok=True)
    log = (options.run_dir / "cases.jsonl").open("w")  # every case, saved rows included
    console = Console(stderr=True)
    per_suite = options.count(full=0, quick=1)  # 0: every case
    total = sum(min(len(s.cases), per_suite or len(s.cases)) for s in suites)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"planning with {llm.name}", total=total)

        def record(case: CaseResult) -> None:
            log.write(json.dumps(dataclasses.asdict(case)) + "\n")
            log.flush()
            mark = "[green]pass[/]" if case.passed else f"[red]FAIL[/] {'; '.join(case.failures)}"
            mended = f", {len(case.mended)} mended" if case.mended else ""
            console.print(
                f"{case.suite}/{case.case}: {mark} ({case.llm_rounds} round(s){mended}, {case.seconds:.1f} s)"
            )
            progress.advance(task)

        rows = options.run_dir / "rows"
        results: list[CaseResult] = []
        try:
            for suite in suites:
                for case in suite.cases[: per_suite or None]:

                    def plan(suite: Suite = suite, case: Case = case) -> dict[str, Any]:
                        outcome = run_case(
                            llm,
                            suite,
                            case,
                            preference_rules=rules,
                            max_repairs=config.max_repairs,
                            learned=learned,
                            steps=config.plans_in_steps,
                            knowledge=knowledge,
                        )
                        return dataclasses.asdict(outcome)

                    row = saved_row(rows, f"{suite.name}-{case.id}", plan)
                    results.append(CaseResult(**{k: tuple(v) if isinstance(v, list) else v for k, v in row.items()}))
                    record(results[-1])
        finally:
            log.close()
    # Scored from what was dispatched against the suites as they are now (a resumed run's saved rows too).
    expects = {(suite.name, case.id): case.expect for suite in suites for case in suite.cases}
    for suite in suites:
        _add_suite(result, suite, [r for r in results if r.suite == suite.name], expects)
    for set_name in dict.fromkeys(set_of.values()):
        mine = [r for r in results if set_of[r.suite] == set_name]
        score = accuracy(mine)["all"]
        result.add(f"{set_name}_accuracy", 100 * score, "%", f"{len(mine)} cases of the {set_name} suites")
        result.add(f"{set_name}_forbidden_dispatches", len(_forbidden(mine, expects)), "dispatches")
    scores = accuracy(results)
    result.add("all_accuracy", 100 * scores["all"], "%", f"{len(results)} cases, backend {llm.name}")
    forbidden = _forbidden(results, expects)
    at_stake = sum(1 for r in results if expects[r.suite, r.case].forbid)
    result.add(
        "forbidden_dispatches",
        len(forbidden),
        "dispatches",
        f"of what a diet, allergy, dislike or explicit wish rules out ({at_stake} case(s) hold such an object)",
    )
    result.details["forbidden_dispatched"] = forbidden
    result.add("questions_max_per_case", max((len(r.questions) for r in results), default=0), "questions")
    seconds = [r.seconds for r in results]
    result.add("plan_time_p50", percentile(seconds, 50), "s", "per request, repairs included")
    result.add("plan_time_p99", percentile(seconds, 99), "s", "per request, repairs included")
    result.add("plan_time_max", max(seconds), "s")
    result.add("repair_rounds_mean", sum(r.llm_rounds - 1 for r in results) / len(results), "rounds")
    result.add("llm_repair_rounds", sum(r.llm_rounds - 1 for r in results), "rounds", "LLM rounds after the first")
    result.add("deterministic_repairs", sum(len(r.mended) for r in results), "fixes", "mended without the LLM")
    result.details["cases"] = [
        {"suite": r.suite, "case": r.case, "passed": r.passed, "failures": list(r.failures)} for r in results
    ]
    names = [suite.name for suite in suites]
    bar_chart(
        options.run_dir / "personalization.png",
        f"dispatch accuracy per suite ({llm.name})",
        [*names, "all"],
        {"accuracy": [100 * scores[name] for name in [*names, "all"]]},
        unit="%",
        ylim=(0, 105),
    )
    return result


def _forbidden(results: list[CaseResult], expects: dict[tuple[str, str], Expect]) -> list[str]:
    return [
        f"{r.suite}/{r.case}: {bad}"
        for r in results
        for bad in forbidden_dispatches(r.dispatched, expects[r.suite, r.case])
    ]


def _add_suite(
    result: BenchResult, suite: Suite, cases: list[CaseResult], expects: dict[tuple[str, str], Expect]
) -> None:
    """A suite's accuracy, forbidden dispatches, questions and plan time."""
    if not cases:
        return
    name = suite.name
    result.add(f"{name}_accuracy", 100 * accuracy(cases)["all"], "%", f"{len(cases)} case(s): {suite.description}")
    result.add(f"{name}_forbidden_dispatches", len(_forbidden(cases, expects)), "dispatches")
    expected = sum(len(expects[name, r.case].ask) for r in cases)
    right = sum(len(set(r.questions) & set(expects[name, r.case].ask)) for r in cases)
    knowable = sum(len(set(r.questions) - set(expects[name, r.case].ask)) for r in cases)
    result.add(f"{name}_questions_right", right, "questions", f"asked where the case expects one ({expected} expected)")
    result.add(f"{name}_questions_knowable", knowable, "questions", "asked where the answer was knowable (misses)")
    seconds = [r.seconds for r in cases]
    result.add(f"{name}_plan_time_p50", percentile(seconds, 50), "s")
    result.add(f"{name}_plan_time_p99", percentile(seconds, 99), "s")


BENCHMARKS.register(
    "personalization",
    Benchmark("personalization", "plan dispatch accuracy per suite (paper section 4.1), any configured LLM", run),
)
