"""The scripted backend (NOT AN LLM, for the demo): replies chosen by what the request
asks for, clear errors for a bad script, and the demo's script telling its story through
the real validator (the meat offered to a vegetarian is refused, the repair is valid)."""

from __future__ import annotations

from pathlib import Path

import pytest

from carryon_common.core.errors import ConfigError
from carryon_planner.core.facts import load_preference_rules
from carryon_planner.core.llm import ChatMessage, LlmError
from carryon_planner.core.personalization import plan_request
from carryon_planner.core.scripted_llm import ScriptedLlm
from carryon_policy.core.skills import load_skill_library, skills_path

CONFIG = Path(__file__).resolve().parents[2] / "config"
SCENE = {"kitchen_counter": ("pink_cover", "carrot under pink_cover", "plate"), "dining_table": ("bowl",)}
SEEN = {"kitchen_counter": ("meat in plate", "pink_cover", "plate")}


def test_the_first_matching_entry_answers(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(
        "replies:\n"
        "  - {when: {schema: Plan, contains: again}, reply: 'second'}\n"
        "  - {when: {schema: Plan}, reply: {reply: first}}\n"
    )
    llm = ScriptedLlm(script)
    assert llm.complete([ChatMessage("user", "plan it")], {"title": "Plan"}) == '{"reply": "first"}'
    assert llm.complete([ChatMessage("user", "plan it again")], {"title": "Plan"}) == "second"
    with pytest.raises(LlmError, match="no scripted reply"):
        llm.complete([ChatMessage("user", "x")], {"title": "Summary"})
    assert llm.answered == 2 and "NOT AN LLM" in llm.name


def test_a_bad_script_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    script = tmp_path / "bad.yaml"
    script.write_text("replies:\n  - {when: {schema: Plan, sometimes: yes}, reply: x}\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml"):
        ScriptedLlm(script)


def test_the_demo_script_tells_its_story_through_the_real_validator() -> None:
    llm = ScriptedLlm(CONFIG / "planner" / "demo_script.yaml")
    library = load_skill_library(skills_path(str(CONFIG / "skills" / "library.yaml")))
    rules = load_preference_rules(CONFIG / "planner" / "preferences.yaml")
    users = {"alice": {"diet": {"preference": "vegetarian"}}}

    def plan(observations: dict[str, tuple[str, ...]] | None = None):  # type: ignore[no-untyped-def]
        return plan_request(llm, request="Serve me food", user="alice", users=users, scene=SCENE, library=library,
                            preference_rules=rules, max_repairs=2, observations=observations)  # fmt: skip

    first = plan()
    assert not first.refused and [s.kind for s in first.plan.subtasks] == ["observe"]
    replan = plan(SEEN)
    assert not replan.refused and len(replan.attempts) == 2
    assert replan.attempts[0].rejected_because.startswith("[preference_conflict]")
    assert "meat" not in {s.target for s in replan.plan.subtasks} and "vegetarian" in replan.plan.reply
