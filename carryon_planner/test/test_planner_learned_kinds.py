"""Names the taxonomy does not know, classified by the LLM (core/learned_kinds.py): asked
once, kept, added to the taxonomy so a diet rules them out; an LLM that fails or answers out
of schema changes nothing; a corrupt cache is set aside."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from carryon_common.core.llm import ChatMessage, LlmError
from carryon_common.core.skills import SkillLibrary, VlaSkill
from carryon_planner.core.facts import load_preference_rules
from carryon_planner.core.learned_kinds import LearnedKinds
from carryon_planner.core.memory_ops import MemoryContext, StoredFact
from carryon_planner.core.request_planner import RequestPlanner
from carryon_planner.core.taxonomy import ruled_out

CONFIG = Path(__file__).resolve().parents[2] / "config"
RULES = load_preference_rules(CONFIG / "planner" / "preferences.yaml")


@dataclass
class TwoSchemaLlm:
    """Answers a NameKinds request with `kinds` (name -> kinds) and a Plan request with `plan`."""

    kinds: dict[str, list[str]] | str
    plan: str = ""
    seen: list[str] = field(default_factory=list)
    name: str = "fake"

    def complete(
        self, messages: Sequence[ChatMessage], schema: dict[str, Any] | None = None, *, timeout_s: float | None = None
    ) -> str:
        assert schema is not None
        self.seen.append(schema["title"])
        if schema["title"] == "Plan":
            return self.plan
        if isinstance(self.kinds, str):
            raise LlmError(self.kinds)
        assert set(schema["properties"]["names"]["items"]["properties"]["name"]["enum"]) >= set(self.kinds) - {"x"}
        return json.dumps({"names": [{"name": n, "kinds": k} for n, k in self.kinds.items()]})


def test_unknown_names_are_asked_once_and_a_diet_then_rules_them_out(tmp_path: Path) -> None:
    assert not RULES.kinds_of("bresaola") and RULES.kinds_of("turkey_slices")  # the curated table's limit
    llm = TwoSchemaLlm({"bresaola": ["meat"], "bowl": []})
    learned = LearnedKinds(tmp_path / "kinds.json")
    notes = learned.learn(llm, ["bresaola", "bowl", "turkey_slices"], RULES)
    assert llm.seen == ["NameKinds"] and notes == ["classified 2 name(s) the taxonomy does not know (bresaola: meat)"]
    assert ruled_out(["bresaola", "bowl"], ["vegetarian"], learned.taxonomy(RULES)) == {
        "bresaola": "vegetarian: bresaola is meat"
    }
    assert learned.learn(llm, ["bresaola", "bowl"], RULES) == [] and llm.seen == ["NameKinds"]  # asked once
    again = LearnedKinds(tmp_path / "kinds.json")  # kept across runs
    assert again.known == {"bowl": (), "bresaola": ("meat",)} and again.unknown(["bresaola"], RULES) == []


def test_a_failing_or_wayward_llm_changes_nothing(tmp_path: Path) -> None:
    learned = LearnedKinds()
    notes = learned.learn(TwoSchemaLlm("connection refused"), ["bresaola"], RULES)
    assert "not classified" in notes[0] and "connection refused" in notes[0] and learned.known == {}
    assert learned.unknown(["bresaola"], RULES) == ["bresaola"]  # asked again next time
    wayward = TwoSchemaLlm({"bresaola": ["meat", "rocket_fuel"], "x": ["meat"]})
    notes = learned.learn(wayward, ["bresaola", "quorn"], RULES)
    assert learned.known == {"bresaola": ("meat",)}  # not-asked names and unknown kinds dropped
    assert notes[-1] == "the LLM did not classify quorn (asked again next time)"
    assert learned.taxonomy(RULES).kinds["meat"][-1] == "bresaola"


def test_a_corrupt_cache_is_set_aside_not_lost(tmp_path: Path) -> None:
    path = tmp_path / "kinds.json"
    path.write_text("{not json", encoding="utf-8")
    learned = LearnedKinds(path)
    assert learned.known == {} and "set aside" in learned.problems[0]
    assert (tmp_path / "kinds.json.corrupt").read_text(encoding="utf-8") == "{not json"


def test_the_planner_asks_before_planning_for_a_user_with_facts_and_drops_what_it_rules_out() -> None:
    library = SkillLibrary(vla=[VlaSkill(instruction="put the bresaola in the bowl", objects=("bresaola", "bowl"))])
    step = {"id": "s1", "kind": "vla", "objective": "in the bowl", "instruction": "put the bresaola in the bowl",
            "target": "bresaola", "destination": "bowl"}  # fmt: skip
    plan = json.dumps({"reply": "I will serve the bresaola.", "subtasks": [step]})
    llm = TwoSchemaLlm({"bresaola": ["meat"], "bowl": []}, plan)
    planner = RequestPlanner(llm, library, RULES, max_repairs=0, learned=LearnedKinds())
    context = MemoryContext(rendered="", facts=(StoredFact("diet", "preference", "vegetarian"),),
                            scene={"counter": ("bresaola", "bowl")})  # fmt: skip
    outcome = planner.plan("alice", "Serve me food", context)
    assert llm.seen == ["NameKinds", "Plan"] and outcome.refused and outcome.plan.subtasks == []
    assert outcome.notes == ("classified 2 name(s) the taxonomy does not know (bresaola: meat)",)
    assert outcome.attempts[0].mended[0].startswith("[preference_conflict] dropped s1: bresaola")
    # A user without facts has nothing to rule out: no classification round.
    llm.seen.clear()
    planner.plan("guest", "Serve me food", MemoryContext(rendered="", scene={"counter": ("salami_x",)}))
    assert llm.seen == ["Plan"]
