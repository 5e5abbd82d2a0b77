"""Plan, validate, repair: what the validator can mend by itself is mended (core/mend.py),
the other failed checks go back to the LLM up to `max_repairs` times, then the request is
refused safely. A plan that copied a family whole, which mend answers by asking the user
which ones, is first cut down to what the model picks one thing at a time (core/choose.py).
An invalid plan is never returned as dispatchable."""

from __future__ import annotations

from dataclasses import dataclass

from carryon_common.core.llm import ChatMessage, LlmClient, LlmError
from carryon_planner.core.ask_back import asked_about
from carryon_planner.core.choose import ASKED, choose_for_crowded
from carryon_planner.core.mend import mend
from carryon_planner.core.plan import Plan, PlanParseError, parse_plan, plan_json_schema
from carryon_planner.core.steps import as_steps, expand, parse_steps, steps_json_schema
from carryon_planner.core.validator import PlanningFacts, ValidationReport, Validator

SAFE_REFUSAL_REPLY = "Sorry, I could not work out a safe plan for that. Nothing was done."


@dataclass(frozen=True)
class Attempt:
    """One LLM round: its raw reply, why it was rejected ("" when accepted) and what was
    mended in it without the LLM (then the mended plan is what was accepted or handed back)."""

    reply: str
    rejected_because: str
    mended: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlanningOutcome:
    """`plan` is either valid (dispatchable) or a safe refusal (`refused` True, no subtasks)."""

    plan: Plan
    refused: bool
    attempts: tuple[Attempt, ...]
    notes: tuple[str, ...] = ()  # what else planning did (names classified for the taxonomy)
    left_out: tuple[tuple[str, str], ...] = ()  # (object, why): in the scene, ruled out by the user's preferences
    questions: tuple[str, ...] = ()  # objects the reply asks the user about instead of handing them over

    def left_out_lines(self) -> list[str]:
        """What the plan leaves out of the scene for the user's preferences, one line each."""
        return [f"left out for the user's preferences: {name.replace('_', ' ')} ({why})" for name, why in self.left_out]

    @property
    def repairs(self) -> int:
        return max(0, len(self.attempts) - 1)


def safe_refusal(reason: str) -> Plan:
    return Plan(reply=SAFE_REFUSAL_REPLY, subtasks=[], memory_operations=[], refusal=reason[:300])


def plan_with_repair(
    llm: LlmClient,
    messages: list[ChatMessage],
    facts: PlanningFacts,
    *,
    max_repairs: int,
    validator: Validator,
    steps: bool = False,
) -> PlanningOutcome:
    """Ask `llm` for a plan; hand parse errors and failed checks back up to `max_repairs`
    times. A plan the LLM itself refuses is returned as such (after validation). `steps`:
    the LLM answers with a step plan (core/steps.py), expanded here into a Plan."""
    names = sorted(facts.objects | facts.locations)
    shape = steps_json_schema if steps else plan_json_schema
    schema = shape(
        facts.instructions,
        names,
        control_skills=facts.control_skills,
        moves=facts.asks_for_action,
        locations=sorted(facts.locations),
    )
    conversation = list(messages)
    attempts: list[Attempt] = []
    for _ in range(max_repairs + 1):
        try:
            text = llm.complete(conversation, schema)
        except LlmError as exc:
            attempts.append(Attempt("", f"LLM unavailable: {exc}"))
            return PlanningOutcome(safe_refusal(f"the planner's LLM ({llm.name}) failed: {exc}"), True, tuple(attempts))
        try:
            plan = (
                expand(parse_steps(text), names, facts.whereabouts, facts.skill_objects) if steps else parse_plan(text)
            )
        except PlanParseError as exc:
            feedback = f"Your answer is not a valid plan ({'; '.join(exc.problems)}). Answer with one JSON plan."
            attempts.append(Attempt(text, str(exc)))
        else:
            report: ValidationReport = validator.validate(plan, facts)
            mended = mend(plan, facts) if not report.ok else None
            fixes: tuple[str, ...] = ()
            if mended is not None:  # validated again: mending never passes what the checks refuse
                copied = plan
                plan, fixes, report = mended.plan, mended.fixes, validator.validate(mended.plan, facts)
                if report.ok and any(f.startswith(ASKED) for f in fixes):
                    plan, fixes = _chosen_instead(llm, copied, facts, validator) or (plan, fixes)
            if report.ok:
                attempts.append(Attempt(text, "", fixes))
                return PlanningOutcome(
                    plan,
                    plan.refusal is not None,
                    tuple(attempts),
                    left_out=present_ruled_out(facts),
                    questions=asked_about(fixes),
                )
            feedback = report.feedback() + ("\n(Subtask sN is your step N.)" if steps else "")
            attempts.append(Attempt(text, "; ".join(str(v) for v in report.violations), fixes))
            if mended is not None:  # the LLM is shown the mended plan: what is left to repair
                text = (as_steps(plan) if steps else plan).model_dump_json(exclude_defaults=True)
        conversation += [ChatMessage("assistant", text), ChatMessage("user", feedback)]
    last = attempts[-1].rejected_because
    reason = f"no valid plan after {max_repairs} repair round(s); last problem: {last}"
    return PlanningOutcome(safe_refusal(reason), True, tuple(attempts))


def present_ruled_out(facts: PlanningFacts) -> tuple[tuple[str, str], ...]:
    """(object, why) for what scene memory or an observation holds that the user's
    preferences or the request's own wishes rule out: a valid plan never acts on it."""
    present = facts.in_scene or frozenset()
    return tuple(sorted((name, why) for name, why in facts.ruled_out.items() if name in present))


def _chosen_instead(
    llm: LlmClient, copied: Plan, facts: PlanningFacts, validator: Validator
) -> tuple[Plan, tuple[str, ...]] | None:
    """A plan that copied a family whole, cut down to what the model picks one thing at a
    time (core/choose.py), mended and validated like any plan; None: the user is asked."""
    found = choose_for_crowded(llm, copied, facts)
    if found is None:
        return None
    plan, fixes = found
    report = validator.validate(plan, facts)
    if not report.ok and (mended := mend(plan, facts)) is not None:
        plan, fixes, report = mended.plan, (*fixes, *mended.fixes), validator.validate(mended.plan, facts)
    return (plan, fixes) if report.ok and plan.physical else None
