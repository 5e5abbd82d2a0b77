"""The executive with fake dispatchers: dependency order, conditions, failures, replan on
revealed contents, and policy + judge + recovery with resume."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from carryon_planner.core.executive import (
    Executive,
    Report,
    State,
    Verdict,
    condition_holds,
    differs_from_memory,
    hidden_under,
    run_vla,
)
from carryon_planner.core.plan import Plan, PlannedSubtask

SCENE = {"kitchen_counter": ("pink_cover", "carrot under pink_cover", "plate"), "dining_table": ("bowl",)}


def plan(*subtasks: dict[str, Any]) -> Plan:
    return Plan.model_validate({"reply": "ok", "subtasks": list(subtasks)})


OBSERVE = {"id": "s1", "kind": "observe", "objective": "look", "target": "kitchen_counter"}
OPEN = {"id": "s2", "kind": "vla", "objective": "cover off", "instruction": "open the pink cover",
        "target": "pink_cover", "depends_on": ["s1"], "condition": "carrot under pink_cover"}  # fmt: skip
CARROT = {"id": "s3", "kind": "vla", "objective": "carrot in bowl", "instruction": "put the carrot in the bowl",
          "target": "carrot", "destination": "bowl", "depends_on": ["s2"]}  # fmt: skip
SAY = {"id": "s4", "kind": "say", "objective": "Enjoy!", "depends_on": ["s3"]}


@dataclass
class FakeDispatch:
    seen: tuple[str, ...] = SCENE["kitchen_counter"]
    failing: set[str] = field(default_factory=set)
    calls: list[str] = field(default_factory=list)
    permitted: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def run_vla(self, subtask: PlannedSubtask, permitted: tuple[str, ...] = ()) -> Report:
        self.calls.append(subtask.id)
        self.permitted[subtask.id] = permitted
        return Report(subtask.id not in self.failing, "judge says so")

    def observe(self, subtask: PlannedSubtask) -> Report:
        self.calls.append(subtask.id)
        return Report(True, "looked", {subtask.target: self.seen})

    def say(self, subtask: PlannedSubtask) -> Report:
        self.calls.append(subtask.id)
        return Report(True, subtask.objective)

    def control(self, subtask: PlannedSubtask) -> Report:
        return Report(False, "no control skills")


def test_dependency_order_and_a_condition_that_holds() -> None:
    dispatch = FakeDispatch()
    result = Executive(plan(SAY, CARROT, OPEN, OBSERVE), dispatch, SCENE).run()
    assert result.succeeded and dispatch.calls == ["s1", "s2", "s3", "s4"]


def test_lifting_a_cover_may_touch_what_scene_memory_says_it_hides() -> None:
    """The shield and the contact monitor are told (SetTask permitted_contacts) that the
    subtask lifting the pink cover may touch the carrot memory places under it; other
    subtasks get nothing extra."""
    dispatch = FakeDispatch()
    Executive(plan(SAY, CARROT, OPEN, OBSERVE), dispatch, SCENE).run()
    opened = next(s for s in plan(SAY, CARROT, OPEN, OBSERVE).subtasks if s.target == "pink_cover")
    assert dispatch.permitted[opened.id] == ("carrot",)
    assert all(p == () for sid, p in dispatch.permitted.items() if sid != opened.id)
    assert hidden_under({"counter": ("Carrot under pink_cover", "bread under towel")}, "towel") == ("bread",)
    assert hidden_under(SCENE, "") == () and hidden_under(SCENE, "plate") == ()


def test_a_cover_seen_keeps_what_memory_says_it_hides() -> None:
    """A camera cannot see under the pink cover: seeing the cover (not the carrot) leaves
    scene memory's "carrot under pink_cover" standing, and the condition holds."""
    dispatch = FakeDispatch(seen=("pink_cover", "plate"))
    outcome = Executive(plan(OBSERVE, OPEN, CARROT), dispatch, SCENE).run()
    assert outcome.succeeded and dispatch.calls == ["s1", "s2", "s3"]


def test_a_false_condition_skips_the_subtask_and_its_dependents() -> None:
    dispatch = FakeDispatch(seen=("pink_cover", "carrot", "plate"))  # carrot no longer under the cover
    result = Executive(plan(OBSERVE, OPEN, CARROT), dispatch, {"kitchen_counter": ("pink_cover", "carrot", "plate")})
    outcome = result.run()
    states = {r.subtask.id: r.state for r in outcome.records}
    assert states == {"s1": State.SUCCEEDED, "s2": State.SKIPPED, "s3": State.SKIPPED} and outcome.succeeded
    assert dispatch.calls == ["s1"]


def test_a_failure_cancels_its_dependents() -> None:
    dispatch = FakeDispatch(failing={"s2"})
    outcome = Executive(plan(OBSERVE, OPEN, CARROT, SAY), dispatch, SCENE).run()
    states = {r.subtask.id: r.state for r in outcome.records}
    assert states["s2"] == State.FAILED and states["s3"] == states["s4"] == State.CANCELLED
    assert not outcome.succeeded and "s2 failed" in outcome.message


def test_revealed_contents_stop_the_run_for_a_replan() -> None:
    dispatch = FakeDispatch(seen=("pink_cover", "carrot under pink_cover", "plate", "meat on plate"))
    outcome = Executive(plan(OBSERVE, OPEN, CARROT), dispatch, SCENE).run()
    assert not outcome.succeeded and outcome.replan == {"kitchen_counter": dispatch.seen}
    assert dispatch.calls == ["s1"] and "replan" in outcome.message


def test_conditions_are_decided_from_observations() -> None:
    seen = {"kitchen_counter": ("carrot under pink_cover", "plate")}
    assert condition_holds("carrot under pink_cover", seen) is True
    assert condition_holds("carrot under plate", seen) is False
    assert condition_holds("carrot at kitchen_counter", seen) is True
    assert condition_holds("meat present", seen) is False and condition_holds("meat absent", seen) is True
    assert condition_holds("carrot under pink_cover", {}) is None


@dataclass
class FakePlant:
    """The judge says `verdicts` in turn; the policy uses 10 steps per verdict poll."""

    verdicts: list[Verdict]
    recover_ok: bool = True
    log: list[str] = field(default_factory=list)
    _steps: int = 0
    _budget: int = 0

    def set_task(self, subtask: PlannedSubtask, permitted: tuple[str, ...] = ()) -> None:
        self.log.append("task")

    def start_policy(self, subtask: PlannedSubtask, budget: int) -> None:
        self.log.append(f"start {budget}")
        self._steps, self._budget = 0, budget

    def policy_steps(self) -> tuple[int, bool]:
        self._steps = min(self._budget, self._steps + 10)
        return self._steps, self._steps >= self._budget

    def suspend_policy(self) -> int:
        self.log.append("suspend")
        return self._steps

    def verdict(self, subtask: PlannedSubtask) -> tuple[Verdict, str]:
        verdict = self.verdicts.pop(0) if self.verdicts else Verdict.RUNNING
        return verdict, verdict.value

    def recover(self, subtask: PlannedSubtask) -> tuple[bool, str]:
        self.log.append("recover")
        return self.recover_ok, "re-grasped" if self.recover_ok else "lost it"


CARROT_SUBTASK = PlannedSubtask.model_validate({**CARROT, "depends_on": []})


def test_failure_recovery_and_resume_with_the_remaining_budget() -> None:
    plant = FakePlant([Verdict.RUNNING, Verdict.FAILED, Verdict.RUNNING, Verdict.SUCCESS])
    report = run_vla(CARROT_SUBTASK, plant, budget=100, max_recoveries=2)
    assert report.succeeded
    assert plant.log == ["task", "start 100", "suspend", "recover", "start 80", "suspend"]


def test_recovery_that_gives_up_or_runs_out_fails_the_subtask() -> None:
    plant = FakePlant([Verdict.FAILED], recover_ok=False)
    report = run_vla(CARROT_SUBTASK, plant, budget=100, max_recoveries=2)
    assert not report.succeeded and "recovery gave up: lost it" in report.message
    plant = FakePlant([Verdict.FAILED, Verdict.FAILED])
    report = run_vla(CARROT_SUBTASK, plant, budget=100, max_recoveries=1)
    assert not report.succeeded and "after 1 recovery attempt(s)" in report.message
    plant = FakePlant([])  # judge never says success: the budget runs out
    report = run_vla(CARROT_SUBTASK, plant, budget=30, max_recoveries=0)
    assert not report.succeeded and "budget spent" in report.message


def test_what_contradicts_scene_memory() -> None:
    memory = {"kitchen_counter": ("pink_cover", "carrot under pink_cover", "plate")}
    # The carrot is hidden by the cover that is seen: consistent.
    assert differs_from_memory({"kitchen_counter": ("pink_cover", "plate")}, memory) == {}
    # Meat nobody remembered: newly revealed.
    seen = ("meat in plate", "pink_cover", "plate")
    assert differs_from_memory({"kitchen_counter": seen}, memory) == {"kitchen_counter": seen}
    # The plate is gone (and nothing could hide it): contradicted.
    assert differs_from_memory({"kitchen_counter": ("pink_cover",)}, memory) != {}
    # What the plan moves is expected to change: the carrot seen (uncovered), the cover gone.
    acted = frozenset({"carrot", "pink_cover"})
    assert differs_from_memory({"kitchen_counter": ("carrot", "plate")}, memory, acted) == {}
