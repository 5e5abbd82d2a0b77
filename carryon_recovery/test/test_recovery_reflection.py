"""Versioned recovery skills and reflection: load / diff / write-next, and proposals from a
stub LLM over real HTTP — a valid one becomes v2, every invalid one is rejected with the
reason and writes nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from carryon_common.core.errors import ConfigError
from carryon_common.core.openai_client import OpenAiClient, ResponseFormat
from carryon_recovery.core.library import SkillLibrary, diff
from carryon_recovery.core.reflection import Attempt, Operation, proposal_schema, reflect
from carryon_sim.harness.fakes.openai_server import StubReply, StubVlmServer

SEED = Path(__file__).resolve().parents[2] / "config" / "skills" / "recovery"


@pytest.fixture
def library(tmp_path: Path) -> SkillLibrary:
    shutil.copytree(SEED, tmp_path / "recovery")
    return SkillLibrary(tmp_path / "recovery")


def attempt(number: int, completed: bool = False) -> Attempt:
    """A re-grasp that closed on nothing: the grasp point was too low on a tall bottle."""
    return Attempt.model_validate({
        "attempt_id": f"a{number}", "skill": "regrasp", "version": 1, "instruction": "put the bottle in the bowl",
        "target": "bottle", "outcome": "fallback", "task_completed": completed,
        "operations": [
            {"op": "relocalize", "ok": True, "measured": {"target_center": [0.5, 0.1, 0.48]}},
            {"op": "grasp", "ok": True, "planned": {"tcp_z": 0.44}, "measured": {"tcp_z": 0.452}},
            {"op": "check_holding", "ok": False, "measured": {"gripper_width_m": 0.0},
             "note": "fingers closed below the bottle's shoulder and slipped off"},
        ],
        "after_resume": "" if completed else f"bottle not in any container; no progress for {8 + number}.0 s",
    })  # fmt: skip


def proposal(**changes: Any) -> str:
    base = {"decision": "UPDATE", "diagnosis": "grasp too low: fingers closed on nothing after the lift",
            "evidence": ["a1: check_holding width 0.0", "a2: check_holding width 0.0"], "kind": "parameter",
            "parameter": "grasp_height_m", "value": 0.06}  # fmt: skip
    return json.dumps({**base, **changes})


def run(library: SkillLibrary, *replies: str | StubReply):  # type: ignore[no-untyped-def]
    with StubVlmServer(list(replies)) as stub:
        llm = OpenAiClient(base_url=stub.base_url, model="reflector", api_key="x", timeout_s=5.0, attempts=1)
        outcome = reflect(llm, library, "regrasp", [attempt(1), attempt(2), attempt(3), attempt(4)])
        prompt = "\n".join(stub.requests[0].texts()) if stub.requests else ""
    return outcome, prompt


def test_the_seed_version_loads_with_ranges() -> None:
    version = SkillLibrary(SEED).load("regrasp")
    assert version.version == 1 and version.parent is None and version.procedure[-1] == "resume"
    assert version.value("grasp_height_m") == 0.008


def test_a_valid_proposal_writes_the_next_version_with_lineage(library: SkillLibrary) -> None:
    outcome, prompt = run(library, proposal())
    assert outcome.decision == "UPDATE", outcome.reason
    v2 = library.load("regrasp")
    assert v2.version == 2 and v2.parent == 1 and v2.value("grasp_height_m") == 0.06
    assert v2.revisions[-1].evidence and v2.revisions[-1].source.startswith("reflection:openai:reflector")
    assert library.load("regrasp", 1).value("grasp_height_m") == 0.008  # v1 untouched
    assert diff(library.load("regrasp", 1), v2)[0] == "parameters.grasp_height_m: 0.008 -> 0.06"
    # The reflector saw the rules, the allowed ranges and at most three attempts.
    assert "Selected target masks are unverified" in prompt and "allowed 0.0 .. 0.12" in prompt
    assert "### a3" in prompt and "### a4" not in prompt and "PLANNED" in prompt
    # What the judge said after each hand-back, as measured evidence.
    assert "after resume (judge, MEASURED): bottle not in any container; no progress for 11.0 s" in prompt


def test_a_strategy_revision_is_validated_too(library: SkillLibrary) -> None:
    outcome, _ = run(library, proposal(kind="strategy", parameter="", value=None,
                                       strategy={"retries_with_renewed_perception": 2}))  # fmt: skip
    assert outcome.decision == "UPDATE" and library.load("regrasp").strategy.retries_with_renewed_perception == 2


def test_the_revision_kind_is_what_the_proposal_changes(library: SkillLibrary) -> None:
    # A small model's kind often disagrees with what it changes: the change decides.
    outcome, _ = run(library, proposal(kind="strategy"))
    assert outcome.decision == "UPDATE" and library.load("regrasp").revisions[-1].kind == "parameter"
    outcome, _ = run(library, proposal(kind="", parameter="", value=None, strategy={"candidate_order": ["side"]}))
    assert outcome.decision == "UPDATE" and library.load("regrasp").revisions[-1].kind == "strategy"


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("this is not json", "malformed reply"),
        (json.dumps({"decision": "MAYBE", "diagnosis": "x"}), "malformed reply: decision"),
        (proposal(parameter="finger_strength"), "unknown parameter 'finger_strength'"),
        (proposal(value=0.5), "outside its allowed range [0.0, 0.12]"),
        (proposal(value=0.008), "nothing changes"),
        (proposal(value=None), "no value or direction given"),
        (proposal(evidence=[]), "must cite evidence"),
        (proposal(parameter="", value=None), "must name a parameter with a new value, or a strategy change"),
        (proposal(kind="strategy", strategy={"teleport": True}), "unknown field(s) ['teleport']"),
        (proposal(kind="strategy", strategy={"retries_with_renewed_perception": 9}), "strategy:"),
        (proposal(kind="strategy", strategy={"candidate_order": ["side", "side"]}), "strategy:"),
        (StubReply(status=500), "reflector unavailable"),
    ],
)
def test_invalid_proposals_are_rejected_and_write_nothing(library: SkillLibrary, reply: Any, reason: str) -> None:
    outcome, _ = run(library, reply, reply)  # the same answer again after the reason was sent back
    assert outcome.decision == "REJECTED" and reason in outcome.reason, outcome.reason
    assert library.versions("regrasp") == [1]


def test_a_rejected_proposal_goes_back_once_with_the_reason(library: SkillLibrary) -> None:
    with StubVlmServer([proposal(parameter="gripper_width_m"), proposal()]) as stub:
        llm = OpenAiClient(base_url=stub.base_url, model="reflector", api_key="x", timeout_s=5.0, attempts=1)
        outcome = reflect(llm, library, "regrasp", [attempt(1), attempt(2)])
        second = "\n".join(stub.requests[1].texts())
    assert outcome.decision == "UPDATE" and "rejected once: unknown parameter 'gripper_width_m'" in outcome.reason
    assert "Rejected: unknown parameter 'gripper_width_m'" in second and library.versions("regrasp") == [1, 2]
    with StubVlmServer([proposal(parameter="nope")] * 3) as stub:  # no more rounds than allowed
        llm = OpenAiClient(base_url=stub.base_url, model="reflector", api_key="x", timeout_s=5.0, attempts=1)
        outcome = reflect(llm, library, "regrasp", [attempt(1)], repair_rounds=1)
        assert len(stub.requests) == 2
    assert outcome.decision == "REJECTED" and "rejected once" in outcome.reason


def test_no_update_writes_nothing(library: SkillLibrary) -> None:
    outcome, _ = run(library, json.dumps({"decision": "NO_UPDATE", "diagnosis": "the evidence is insufficient"}))
    assert outcome.decision == "NO_UPDATE" and library.versions("regrasp") == [1]


def test_versions_are_never_overwritten_and_bad_files_are_named(library: SkillLibrary, tmp_path: Path) -> None:
    v1 = library.load("regrasp")
    (library.root / "regrasp" / "v2.yaml").write_text("skill: regrasp\nversion: 2\n")
    with pytest.raises(ConfigError, match=r"v2\.yaml"):
        library.load("regrasp")
    with pytest.raises(ConfigError, match="never overwritten"):
        from carryon_recovery.core.library import Revision

        library.write_next(v1, {}, Revision(version=2, kind="parameter", change="x", reason="y"))
    with pytest.raises(ConfigError, match="no recovery skill 'nope'"):
        library.load("nope")


def test_carryon_reflect_writes_a_version_and_diffs_it(library: SkillLibrary, tmp_path: Path) -> None:
    from carryon_bringup.cli.main import main

    attempts = tmp_path / "attempts.jsonl"
    attempts.write_text("\n".join(attempt(i).model_dump_json() for i in (1, 2)) + "\n")
    with StubVlmServer([proposal()]) as stub:
        code = main(["reflect", "regrasp", "--skills-dir", str(library.root), "--attempts", str(attempts),
                     "--base-url", stub.base_url])  # fmt: skip
    assert code == 0 and library.versions("regrasp") == [1, 2]
    assert main(["reflect", "regrasp", "--skills-dir", str(library.root), "--diff", "1", "2"]) == 0
    attempts.write_text("{not json\n")
    assert main(["reflect", "regrasp", "--skills-dir", str(library.root), "--attempts", str(attempts)]) == 2


def handed_back(number: int) -> Attempt:
    """A re-grasp that restored the state; the VLA then held the carrot and never let go."""
    return Attempt.model_validate(
        {
            "attempt_id": f"h{number}",
            "skill": "regrasp",
            "version": 1,
            "instruction": "put the carrot in the bowl",
            "target": "carrot",
            "outcome": "resumed",
            "task_completed": False,
            "operations": [
                {"op": "nudge", "ok": False, "note": "no room for the hand beside it"},
                {
                    "op": "grasp",
                    "ok": True,
                    "planned": {"tcp": [0.5, 0.2, 0.43]},
                    "measured": {"gripper_width_m": 0.029},
                },
                {
                    "op": "transport_standoff",
                    "ok": True,
                    "planned": {"tcp": [0.6, -0.26, 0.565]},
                    "measured": {"tcp": [0.6, -0.26, 0.565]},
                },
            ],
            "after_resume": "carrot held by the gripper, not yet released inside bowl",
        }
    )


def test_a_revision_must_address_the_operation_the_attempts_failed_at(library: SkillLibrary) -> None:
    reviewed = [handed_back(1), attempt(1), handed_back(2)]  # most failed after the hand-back
    with StubVlmServer([proposal(), proposal(parameter="standoff_m", direction="lower", value=None)]) as stub:
        schema_in_request = ResponseFormat.JSON_OBJECT_SCHEMA
        llm = OpenAiClient(
            stub.base_url, model="reflector", api_key="x", timeout_s=5.0, attempts=1, response_format=schema_in_request
        )
        outcome = reflect(llm, library, "regrasp", reviewed)
        first = stub.requests[0]
    # Reviewed: the two hand-back failures only, focused on where they failed.
    prompt = "\n".join(first.texts())
    assert "### h1" in prompt and "### h2" in prompt and "### a1" not in prompt
    shaped = "failed after the hand-back (resume: the skill had restored the state); parameters that shape resume"
    assert f"{shaped}: standoff_m" in prompt
    assert "- passed: grasp" in prompt and "- also failed before, retried: nudge (no room" in prompt
    assert '- transport_standoff: ok; planned {"tcp": [0.6, -0.26, 0.565]}' in prompt
    # The schema the server decodes with names only what shapes `resume`, and no strategy change.
    schema = first.body["response_format"]["schema"]
    update = schema["anyOf"][0]["properties"]
    assert update["parameter"] == {"enum": ["standoff_m"]} and len(schema["anyOf"]) == 2
    # grasp_height_m shapes none of it: sent back; a direction without a value moves a quarter of the range.
    why = "parameter 'grasp_height_m' shapes none of the operations the attempts failed at (resume)"
    assert f"rejected once: {why}; those are shaped by: standoff_m" in outcome.reason
    assert outcome.decision == "UPDATE" and library.load("regrasp").value("standoff_m") == 0.05


@pytest.mark.parametrize(
    ("direction", "value", "expected"),
    [("raise", None, 0.15), ("raise", 0.12, 0.12), ("raise", 0.08, 0.15), ("lower", 0.1, 0.05), ("", 0.2, 0.2)],
)
def test_a_direction_sets_the_value_when_the_value_does_not_go_that_way(
    library: SkillLibrary, direction: str, value: float | None, expected: float
) -> None:
    reply = proposal(parameter="standoff_m", direction=direction, value=value)
    with StubVlmServer([reply]) as stub:
        llm = OpenAiClient(base_url=stub.base_url, model="reflector", api_key="x", timeout_s=5.0, attempts=1)
        outcome = reflect(llm, library, "regrasp", [handed_back(1)])
    assert outcome.decision == "UPDATE", outcome.reason
    assert library.load("regrasp").value("standoff_m") == expected


def test_with_nothing_that_shapes_the_failed_operation_only_a_strategy_change_or_no_update_fits() -> None:
    lost = attempt(1).model_copy(update={"operations": [Operation(op="relocalize", ok=False, note="target not seen")]})
    schema = proposal_schema(SkillLibrary(SEED).load("regrasp"), [lost])
    shapes = [sorted(s["required"]) for s in schema["anyOf"]]
    assert shapes == [["decision", "diagnosis", "evidence", "strategy"], ["decision", "diagnosis"]]
