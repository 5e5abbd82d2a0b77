"""The demo's script for the scripted backend (NOT AN LLM) tells its story through the real
validator: the meat offered to a vegetarian is refused, the repair is valid. (The backend
itself is tested in carryon_common/test/test_common_llm_backends.py.)"""

from __future__ import annotations

from pathlib import Path

from carryon_bench.core.personalization_score import plan_request  # planned as planner_node plans an Ask
from carryon_common.core.llm_backends import LLM_BACKENDS, make_llm
from carryon_common.core.scripted_llm import ScriptedLlm
from carryon_common.core.skills import load_skill_library, skills_path
from carryon_planner.core.config import LLM_BACKENDS as CONFIGURABLE
from carryon_planner.core.config import PlannerConfig
from carryon_planner.core.facts import load_preference_rules

CONFIG = Path(__file__).resolve().parents[2] / "config"
SCENE = {"kitchen_counter": ("pink_cover", "carrot under pink_cover", "plate"), "dining_table": ("bowl",)}
SEEN = {"kitchen_counter": ("meat in plate", "pink_cover", "plate")}


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
    assert not replan.refused and len(replan.attempts) == 1  # mended without another LLM round
    assert replan.attempts[0].mended[0].startswith("[preference_conflict] dropped s5: meat")
    assert "meat" not in {s.target for s in replan.plan.subtasks} and "vegetarian" in replan.plan.reply


def test_the_planner_config_builds_its_backend_through_the_common_registry() -> None:
    assert set(CONFIGURABLE) == set(LLM_BACKENDS.names())  # every configurable name has a backend
    llm = make_llm(PlannerConfig(llm_backend="scripted", llm_script_file=str(CONFIG / "planner" / "demo_script.yaml")))
    assert isinstance(llm, ScriptedLlm) and "NOT AN LLM" in llm.name
