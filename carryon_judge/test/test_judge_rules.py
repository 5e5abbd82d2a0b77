"""The judging rules on hand-made facts (paper §F.2)."""

from __future__ import annotations

from judge_fixtures import OBSERVE, PLACE, UNCOVER, fact, scene

from carryon_common.core.subtask import Subtask, SubtaskKind
from carryon_judge.core.progress import ProgressTracker
from carryon_judge.core.rules import Goal, RuleParams, decide, goal_of
from carryon_judge.core.types import VerdictStatus

P = RuleParams(stuck_timeout_s=10.0)
ROLES = {"bowl": "container", "plate": "support", "pink_cover": "cover", "carrot": "item", "meat": "item"}
BOWL = fact("bowl", 0.55, -0.3, height=0.05)


def place(base, now, since=1.0):  # type: ignore[no-untyped-def]
    return decide(goal_of(PLACE, ROLES.get), base, now, since, P)


def test_goal_from_fields_outranks_instruction_and_falls_back_to_it() -> None:
    assert goal_of(PLACE, ROLES.get).goal == Goal.PLACE
    other = Subtask("x", SubtaskKind.VLA, "carrot onto the plate", "put the carrot in the bowl", "carrot", "", "plate")
    assert goal_of(other, ROLES.get).destination == "plate"  # the planner's fields, not the instruction
    bare = Subtask("y", SubtaskKind.VLA, "", "put the meat in the bowl")
    assert (goal_of(bare, ROLES.get).target, goal_of(bare, ROLES.get).destination) == ("meat", "bowl")
    assert goal_of(UNCOVER, ROLES.get).goal == Goal.UNCOVER
    assert goal_of(OBSERVE, ROLES.get).goal == Goal.OBSERVE
    assert goal_of(Subtask("z", SubtaskKind.SAY, "hello"), ROLES.get).goal == Goal.UNSUPPORTED


def test_newly_placed_and_released_is_success() -> None:
    verdict = place(scene(BOWL, fact("carrot", 0.55, 0.3)), scene(BOWL, fact("carrot", 0.55, -0.3, inside="bowl")))
    assert verdict.status == VerdictStatus.SUCCESS


def test_held_inside_or_near_the_destination_is_not_success() -> None:
    base = scene(BOWL, fact("carrot", 0.55, 0.3))
    held = place(base, scene(BOWL, fact("carrot", 0.55, -0.3, inside="bowl", held=True)))
    assert held.status == VerdictStatus.RUNNING
    near = place(base, scene(BOWL, fact("carrot", 0.55, -0.15)))
    assert near.status == VerdictStatus.RUNNING


def test_inside_a_destination_that_is_lifted_or_held_is_not_success() -> None:
    """The fingers caught the bowl's rim with the carrot and lifted both: the carrot is in
    the bowl for the moment and falls out when it is let go (a simulated run: the judge said
    success, the carrot ended 40 cm away)."""
    base = scene(BOWL, fact("carrot", 0.55, -0.15))
    carrot_in = fact("carrot", 0.55, -0.3, inside="bowl", z=0.47)
    lifted = place(base, scene(fact("bowl", 0.55, -0.3, height=0.05, z=0.47), carrot_in))
    assert lifted.status == VerdictStatus.RUNNING and "lifted" in lifted.reason
    held = fact("bowl", 0.55, -0.3, height=0.05, held=True)
    assert place(base, scene(held, fact("carrot", 0.55, -0.3, inside="bowl"))).status == VerdictStatus.RUNNING
    set_down = place(base, scene(fact("bowl", 0.58, -0.28, height=0.05), fact("carrot", 0.58, -0.28, inside="bowl")))
    assert set_down.status == VerdictStatus.SUCCESS  # nudged on the table, not lifted: still the bowl it was


def test_different_object_in_destination_rules_success_out() -> None:
    base = scene(BOWL, fact("carrot", 0.55, 0.3), fact("meat", 0.55, 0.45))
    verdict = place(base, scene(BOWL, fact("carrot", 0.55, 0.3), fact("meat", 0.55, -0.3, inside="bowl")))
    assert verdict.status == VerdictStatus.RUNNING
    assert "different object (meat)" in verdict.reason


def test_invisible_target_or_destination_is_never_success() -> None:
    base = scene(BOWL, fact("carrot", 0.55, 0.3))
    assert place(base, scene(BOWL)).status == VerdictStatus.RUNNING
    assert place(base, scene(fact("carrot", 0.55, -0.3, inside="bowl"))).status == VerdictStatus.RUNNING


def test_goal_present_at_baseline_runs_then_fails_after_the_timeout() -> None:
    there = scene(BOWL, fact("carrot", 0.55, -0.3, inside="bowl"))
    assert place(there, there, since=2.0).status == VerdictStatus.RUNNING
    assert place(there, there, since=11.0).status == VerdictStatus.FAILED


def test_no_progress_past_timeout_fails_unless_already_placed() -> None:
    base = scene(BOWL, fact("carrot", 0.55, 0.3))
    assert place(base, scene(BOWL, fact("carrot", 0.6, 0.1)), since=11.0).status == VerdictStatus.FAILED
    assert place(base, scene(BOWL, fact("carrot", 0.6, 0.1)), since=-1.0).status == VerdictStatus.RUNNING  # unknown
    guarded = place(base, scene(BOWL, fact("carrot", 0.55, -0.3, inside="bowl")), since=30.0)
    assert guarded.status == VerdictStatus.SUCCESS
    assert "already-placed guard" in guarded.reason


def test_uncover_with_ground_truth_and_with_perception() -> None:
    spec = goal_of(UNCOVER, ROLES.get)
    truth_base = scene(fact("pink_cover", hides=frozenset({"carrot"}), height=0.093))
    truth_now = scene(fact("pink_cover", x=0.35, hides=frozenset(), height=0.093), fact("carrot"))
    assert decide(spec, truth_base, truth_now, 1.0, P).status == VerdictStatus.SUCCESS
    nothing = scene(fact("pink_cover", hides=frozenset(), height=0.093))
    assert decide(spec, nothing, nothing, 1.0, P).status == VerdictStatus.RUNNING
    assert decide(spec, nothing, nothing, 11.0, P).status == VerdictStatus.FAILED
    seen_base = scene(fact("pink_cover", height=0.093))
    lifted = scene(fact("pink_cover", x=0.35, z=0.5, height=0.093, held=True), fact("carrot"))
    assert decide(spec, seen_base, lifted, 1.0, P, cover_radius_m=0.07).status == VerdictStatus.RUNNING
    down = scene(fact("pink_cover", x=0.35, height=0.093), fact("carrot"))
    verdict = decide(spec, seen_base, down, 1.0, P, cover_radius_m=0.07)
    assert verdict.status == VerdictStatus.SUCCESS and "newly visible: carrot" in verdict.reason
    nudged = scene(fact("pink_cover", x=0.47, height=0.093))
    assert decide(spec, seen_base, nudged, 1.0, P, cover_radius_m=0.07).status == VerdictStatus.RUNNING


def test_observe_reports_revealed_contents_independently_of_status() -> None:
    spec = goal_of(OBSERVE, ROLES.get)
    base = scene(fact("pink_cover"), BOWL)
    revealed = decide(spec, base, scene(fact("pink_cover", x=0.3), BOWL, fact("carrot")), 1.0, P)
    assert revealed.revealed == ("carrot",) and revealed.scene_update_required
    nothing = decide(spec, base, base, 1.0, P)
    assert nothing.revealed == () and not nothing.scene_update_required


def test_unsupported_subtasks_are_unable_to_judge() -> None:
    spec = goal_of(Subtask("z", SubtaskKind.VLA, "", "push the cube forward", "cube"), ROLES.get)
    assert decide(spec, scene(), scene(), 1.0, P).status == VerdictStatus.UNABLE_TO_JUDGE


def test_progress_is_target_change_towards_the_goal_not_jitter() -> None:
    import numpy as np

    tracker = ProgressTracker(0.01, toward=np.array([0.55, -0.3]), confirm_updates=2)  # judge_node's
    tracker.start(0.0, fact("carrot", 0.55, 0.3))
    assert tracker.update(1.0, fact("carrot", 0.555, 0.295)) == 1.0  # jitter: no progress
    assert tracker.update(2.0, fact("carrot", 0.55, 0.3, held=True)) == 2.0  # grasped? seen once: not yet
    assert tracker.update(2.5, fact("carrot", 0.55, 0.3, held=True)) == 0.0  # twice in a row: grasped
    assert tracker.update(3.0, fact("carrot", 0.55, 0.1, held=True)) == 0.0  # closer to the bowl
    assert tracker.update(5.0, fact("carrot", 0.55, 0.105, held=True)) == 2.0
    # Perception flickering (in the plate one frame, beside it the next; hidden for a frame) is no progress.
    for t in (6.0, 7.0, 8.0):
        tracker.update(t - 0.5, fact("carrot", 0.55, 0.105, held=True, inside="plate"))
        tracker.update(t, None)
        assert tracker.update(t, fact("carrot", 0.55, 0.105, held=True)) == t - 3.0
    assert ProgressTracker(0.01).update(1.0, None) < 0  # not started
    once = ProgressTracker(0.01)  # the default (facts without flicker): every change counts at once
    once.start(0.0, fact("carrot", 0.55, 0.3))
    assert once.update(1.0, fact("carrot", 0.55, 0.3, held=True)) == 0.0
