"""Reflection (paper §3.3.2, §D.3, §F.2): review up to three failed recovery attempts and
propose ONE revision of the skill — a parameter or a strategy change — or NO_UPDATE.

The proposal comes from any LLM behind carryon_common's `LlmClient` interface (an
OpenAI-compatible endpoint in practice) and is never trusted: it must parse, name a known
parameter or strategy field, stay inside the allowed range, actually change something and
cite evidence. Only then is a new version written (`SkillLibrary.write_next`); otherwise
the reason is returned and nothing is written.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from carryon_common.core.errors import CarryOnError, ConfigError
from carryon_common.core.llm import ChatMessage, LlmClient, LlmError
from carryon_recovery.core.library import Parameter, Revision, SkillLibrary, SkillVersion, Strategy

MAX_ATTEMPTS_REVIEWED = 3

RULES = """You review failed attempts of a robot's control-based recovery skill and propose
ONE revision for the next attempts, or NO_UPDATE. Answer with one JSON object following the
schema below, and nothing else.

Rules:
1. Use only the attempts shown. Distinguish PLANNED poses (what the skill commanded) from
   MEASURED observations (gripper width, tool pose, object pose seen afterwards).
2. Selected target masks are unverified: a wrong mask is a possible cause, not a fact.
3. "The whole task failed" is not a diagnosis: name the operation that went wrong and the
   measurement that shows it.
4. A parameter revision changes exactly one listed parameter: its direction (raise or lower)
   and, if you can tell, a new value inside its range in that direction (without one, it
   moves a quarter of its range). A strategy revision changes retries_with_renewed_perception
   (0-3) or candidate_order.
5. Answer NO_UPDATE when the evidence is insufficient, contradictory, or no listed
   parameter or strategy can reasonably address what was measured.
6. evidence: quote the attempt ids and the measurements your diagnosis rests on.
7. `resume` hands the arm back to the VLA, holding the object at the stand-off pose above
   the destination, and the VLA finishes the task from there. An attempt that resumed with
   every operation passed, yet whose task was not completed, failed after the hand-back;
   "after resume" quotes the judge's verdict on what the VLA did from there.
8. Revise what shapes the operation an attempt failed at ("failed ..." names it and the
   parameters that shape it).
"""


class Operation(BaseModel):
    """One step of an attempt: what was planned, what was measured, whether it passed."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    op: str
    planned: dict[str, Any] = Field(default_factory=dict)
    measured: dict[str, Any] = Field(default_factory=dict)
    ok: bool
    note: str = ""


class Attempt(BaseModel):
    """A recovery attempt as recorded by the recovery runner (one JSONL line)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    attempt_id: str
    skill: str
    version: int
    instruction: str
    target: str
    outcome: Literal["resumed", "fallback", "aborted"]
    task_completed: bool | None  # None: not known (no plan followed the attempt; core/outcomes.py)
    operations: list[Operation]
    # The judge's reason when the resumed instruction failed again (what happened after the
    # hand-back, MEASURED by the judge); empty when it succeeded or nobody learned.
    after_resume: str = ""
    images: list[str] = Field(default_factory=list)  # paths of the images saved with the attempt


class Proposal(BaseModel):
    """The reflector's answer."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    decision: Literal["UPDATE", "NO_UPDATE"]
    diagnosis: str = Field(min_length=1, max_length=600)
    evidence: list[str] = Field(default_factory=list, max_length=12)
    kind: Literal["parameter", "strategy", ""] = ""
    parameter: str = ""
    direction: Literal["raise", "lower", ""] = ""  # a parameter's change; `value` (optional) in that direction
    value: float | None = None
    strategy: dict[str, Any] = Field(default_factory=dict)


class ProposalRejected(CarryOnError):
    """The reflector's proposal cannot become a version (the message says why)."""


@dataclass(frozen=True)
class ReflectionOutcome:
    decision: str  # "UPDATE" (a version was written), "NO_UPDATE", or "REJECTED"
    reason: str
    written: SkillVersion | None
    reply: str


def revisable(version: SkillVersion, attempts: Sequence[Attempt]) -> tuple[list[str], bool]:
    """What may address the operations these failed attempts failed at: the parameters that
    shape one of them (`Parameter.shapes`), and whether a strategy change may (a failure
    inside the skill; not one after the hand-back, where the skill had done its part)."""
    failed_at = {failed_operation(a) for a in attempts}
    names = sorted(name for name, p in version.parameters.items() if failed_at & set(p.shapes))
    return names, bool(failed_at - {"resume"})


def proposal_schema(version: SkillVersion, attempts: Sequence[Attempt] = ()) -> dict[str, Any]:
    """The JSON Schema a reply must follow: one of a parameter revision (a parameter that may
    address the attempts' failures, `revisable`; any parameter when no attempts are given),
    a strategy revision (when one may), or NO_UPDATE — each with what it needs required. A
    server that constrains decoding to the schema (llama.cpp's) cannot answer otherwise;
    check_proposal still checks every reply."""
    names, strategy_ok = revisable(version, attempts) if attempts else (sorted(version.parameters), True)
    fields = Proposal.model_json_schema()["properties"]
    why = {"diagnosis": fields["diagnosis"], "evidence": {**fields["evidence"], "minItems": 1}}

    def shape(decision: str, required: list[str], **properties: Any) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"decision": {"enum": [decision]}, **properties},
            "required": ["decision", *required],
            "additionalProperties": False,
        }

    update = ["diagnosis", "evidence"]
    change = {
        "parameter": {"enum": names},
        "direction": {"enum": ["raise", "lower"]},
        "value": fields["value"],
    }
    shapes = [shape("UPDATE", [*update, "parameter", "direction"], **why, **change)] if names else []
    if strategy_ok:
        strategy = Strategy.model_json_schema()["properties"]
        revision = {"type": "object", "properties": strategy, "minProperties": 1, "additionalProperties": False}
        shapes.append(shape("UPDATE", [*update, "strategy"], **why, strategy=revision))
    shapes.append(shape("NO_UPDATE", ["diagnosis"], diagnosis=fields["diagnosis"]))
    return {"title": "Proposal", "anyOf": shapes}


def failed_operation(attempt: Attempt) -> str:
    """The operation a failed attempt went wrong at, from its record: `resume` (after the
    hand-back) when the skill restored the state, else the last operation that failed."""
    if attempt.outcome == "resumed":
        return "resume"
    failed = [op.op for op in attempt.operations if not op.ok]
    return failed[-1] if failed else attempt.outcome


def _operation_lines(version: SkillVersion, attempt: Attempt) -> list[str]:
    """A failed attempt's operations, focused on where it failed: that operation and the
    ones its parameters shape in full (planned vs measured), the rest by name."""
    failed_at = failed_operation(attempt)
    where = f"at {failed_at}"
    if failed_at == "resume":
        where = "after the hand-back (resume: the skill had restored the state)"
    shaping, _ = revisable(version, [attempt])
    shaped = {failed_at} | {op for name in shaping for op in version.parameters[name].shapes}
    lines = [f"- failed {where}; parameters that shape {failed_at}: {', '.join(shaping) or 'none'}"]
    passed = [op.op for op in attempt.operations if op.ok and op.op not in shaped]
    others = [f"{op.op} ({op.note or 'failed'})" for op in attempt.operations if not op.ok and op.op not in shaped]
    if passed:
        lines.append(f"- passed: {', '.join(passed)}")
    if others:
        lines.append(f"- also failed before, retried: {', '.join(others)}")
    return lines + [_operation(op) for op in attempt.operations if op.op in shaped]


def _operation(op: Operation) -> str:
    return (
        f"- {op.op}: {'ok' if op.ok else 'FAILED'}; planned {json.dumps(op.planned)}; "
        f"measured {json.dumps(op.measured)}{'; ' + op.note if op.note else ''}"
    )


def build_messages(version: SkillVersion, attempts: Sequence[Attempt]) -> list[ChatMessage]:
    """System (rules + schema) and user (the current version and the attempts) messages."""
    schema = json.dumps(proposal_schema(version, attempts), sort_keys=True, separators=(",", ":"))
    params = [
        f"- {name}: {p.value} (allowed {p.min} .. {p.max}){' — ' + p.description if p.description else ''}"
        + (f" [shapes {', '.join(p.shapes)}]" if p.shapes else "")
        for name, p in sorted(version.parameters.items())
    ]
    lines = [
        f"## Skill {version.skill}, version {version.version}",
        f"Procedure: {', '.join(version.procedure)}",
        f"Strategy: {json.dumps(version.strategy.model_dump())}",
        "Parameters:",
        *params,
        "Earlier revisions:",
        *([f"- v{r.version} {r.kind}: {r.change} ({r.reason})" for r in version.revisions] or ["- none"]),
        "",
        f"## Failed attempts (up to {MAX_ATTEMPTS_REVIEWED})",
    ]
    for attempt in attempts[:MAX_ATTEMPTS_REVIEWED]:
        lines.append(
            f"### {attempt.attempt_id}: v{attempt.version}, '{attempt.instruction}' (target {attempt.target}), "
            f"outcome {attempt.outcome}, task completed: {attempt.task_completed}"
        )
        if attempt.task_completed is False:
            lines += _operation_lines(version, attempt)
        else:
            lines += [_operation(op) for op in attempt.operations]
        if attempt.after_resume:
            lines.append(f"- after resume (judge, MEASURED): {attempt.after_resume}")
        if attempt.images:
            lines.append(f"- images (unverified views): {', '.join(attempt.images)}")
    return [ChatMessage("system", f"{RULES}\nSchema:\n{schema}\n"), ChatMessage("user", "\n".join(lines))]


def check_proposal(
    version: SkillVersion, proposal: Proposal, attempts: Sequence[Attempt] = ()
) -> tuple[dict[str, Any], str]:
    """(changes to apply, change description) for an UPDATE; ProposalRejected otherwise.
    With the reviewed `attempts`, the change must address what they failed at (`revisable`)."""
    if not proposal.evidence:
        raise ProposalRejected("an UPDATE must cite evidence (attempt ids and measurements)")
    kind = _kind(proposal)
    if attempts:
        _grounded(version, proposal, kind, attempts)
    if kind == "parameter":
        if proposal.parameter not in version.parameters:
            raise ProposalRejected(
                f"unknown parameter {proposal.parameter!r} (known: {', '.join(sorted(version.parameters))})"
            )
        current = version.parameters[proposal.parameter]
        value = _new_value(proposal, current)
        if value is None:
            raise ProposalRejected(f"parameter {proposal.parameter!r}: no value or direction given")
        if not current.min <= value <= current.max:
            raise ProposalRejected(
                f"parameter {proposal.parameter!r}: {value} is outside its allowed range [{current.min}, {current.max}]"
            )
        if value == current.value:
            raise ProposalRejected(
                f"parameter {proposal.parameter!r} is already {current.value}: nothing changes (a revision sets a new "
                f"value inside [{current.min}, {current.max}])"
            )
        parameters = {name: p.model_dump() for name, p in version.parameters.items()}
        parameters[proposal.parameter]["value"] = value
        return {"parameters": parameters}, f"{proposal.parameter} {current.value} -> {value}"
    if kind == "strategy":
        unknown = set(proposal.strategy) - set(Strategy.model_fields)
        if unknown or not proposal.strategy:
            raise ProposalRejected(
                f"strategy: unknown field(s) {sorted(unknown)} (allowed: {', '.join(Strategy.model_fields)})"
                if unknown
                else "strategy: no change given"
            )
        merged = {**version.strategy.model_dump(), **proposal.strategy}
        try:
            strategy = Strategy.model_validate(merged)
        except ValidationError as exc:
            raise ProposalRejected(f"strategy: {exc.errors()[0]['msg']}") from None
        if strategy == version.strategy:
            raise ProposalRejected("strategy: nothing changes")
        change = ", ".join(f"{k} {getattr(version.strategy, k)} -> {v}" for k, v in proposal.strategy.items())
        return {"strategy": strategy.model_dump()}, change
    raise ProposalRejected("an UPDATE must name a parameter with a new value, or a strategy change")


def _grounded(version: SkillVersion, proposal: Proposal, kind: str, attempts: Sequence[Attempt]) -> None:
    """ProposalRejected when the change cannot address the operations the attempts failed at."""
    names, strategy_ok = revisable(version, attempts)
    failed_at = ", ".join(sorted({failed_operation(a) for a in attempts}))
    if kind == "parameter" and proposal.parameter in version.parameters and proposal.parameter not in names:
        raise ProposalRejected(
            f"parameter {proposal.parameter!r} shapes none of the operations the attempts failed at ({failed_at}); "
            f"those are shaped by: {', '.join(names) or 'no parameter'}"
        )
    if kind == "strategy" and not strategy_ok:
        raise ProposalRejected(f"a strategy change cannot address failures after the hand-back ({failed_at})")


STEP_OF_RANGE = 0.25  # a parameter given a direction without a value in it moves this share of its range


def _new_value(proposal: Proposal, current: Parameter) -> float | None:
    """The proposed value: `value` when no direction is given or it lies that way; else (none,
    the current one, or the other way: the direction decides) the current value moved
    STEP_OF_RANGE of its range in the direction, clipped to the range."""
    value, direction = proposal.value, proposal.direction
    if not direction:
        return value
    if value is not None and value != current.value and (value > current.value) == (direction == "raise"):
        return value
    step = STEP_OF_RANGE * (current.max - current.min) * (1.0 if direction == "raise" else -1.0)
    return round(min(current.max, max(current.min, current.value + step)), 6)


def _kind(proposal: Proposal) -> str:
    """The revision's kind: what the proposal changes (a parameter, or the strategy); its
    `kind` decides only when it names both."""
    if proposal.parameter and proposal.strategy:
        return proposal.kind
    return "parameter" if proposal.parameter else "strategy" if proposal.strategy else ""


def failed_attempts(attempts: Sequence[Attempt], skill: str) -> list[Attempt]:
    """The attempts of `skill` after which the task is known not to have been completed
    (an attempt whose outcome nobody learned may have succeeded), at most the review's
    number: those that failed at the operation most failed at (`failed_operation`; the
    earliest such on a tie), in their order, so that the review sees one failure mode."""
    failed = [a for a in attempts if a.skill == skill and a.task_completed is False]
    counts = Counter(failed_operation(a) for a in failed)
    if not counts:
        return []
    common = next(failed_operation(a) for a in failed if counts[failed_operation(a)] == max(counts.values()))
    return [a for a in failed if failed_operation(a) == common][:MAX_ATTEMPTS_REVIEWED]


REPAIR_ROUNDS = 1  # a rejected or malformed proposal is sent back once, with the reason


def reflect(
    llm: LlmClient,
    library: SkillLibrary,
    skill: str,
    attempts: Sequence[Attempt],
    *,
    version: int | None = None,
    repair_rounds: int = REPAIR_ROUNDS,
) -> ReflectionOutcome:
    """Review the attempts of `skill` (its newest version unless `version`), ask the LLM,
    validate, and write the next version when the proposal holds. A malformed or rejected
    proposal goes back to the LLM with the reason, up to `repair_rounds` times (the
    planner's repair loop); the outcome's reason says how many rounds it took."""
    current = library.load(skill, version)
    failed = failed_attempts(attempts, skill)
    if not failed:
        return ReflectionOutcome("NO_UPDATE", "no failed attempts of this skill to review", None, "")
    messages = build_messages(current, failed)
    outcome = ReflectionOutcome("REJECTED", "not asked", None, "")
    rejected: list[str] = []  # why each earlier proposal was sent back
    for round_ in range(repair_rounds + 1):
        try:
            reply = llm.complete(messages, proposal_schema(current, failed))
        except LlmError as exc:
            return ReflectionOutcome("REJECTED", f"reflector unavailable: {exc}", None, "")
        outcome = _judge_reply(library, current, failed, reply, llm.name)
        if outcome.decision != "REJECTED":
            break
        if round_ < repair_rounds:
            rejected.append(outcome.reason)
            again = (
                f"Rejected: {outcome.reason}. Answer again with one JSON object: a revision that follows the rules "
                "(a listed parameter with a new value inside its range, or a strategy field), or NO_UPDATE."
            )
            messages = [*messages, ChatMessage("assistant", reply), ChatMessage("user", again)]
    if round_ > 0:
        earlier = "rejected once" if round_ == 1 else f"rejected {round_} times"
        reason = f"{outcome.reason} (after the proposal was {earlier}: {'; '.join(rejected)})"
        outcome = ReflectionOutcome(outcome.decision, reason, outcome.written, outcome.reply)
    return outcome


def _judge_reply(
    library: SkillLibrary, current: SkillVersion, failed: Sequence[Attempt], reply: str, reflector: str
) -> ReflectionOutcome:
    """One reply: parsed, checked, and written as the next version when it holds."""
    try:
        proposal = Proposal.model_validate_json(reply.strip().removeprefix("```json").strip("`"))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}" for e in exc.errors())
        return ReflectionOutcome("REJECTED", f"malformed reply: {problems}", None, reply)
    if proposal.decision == "NO_UPDATE":
        return ReflectionOutcome("NO_UPDATE", proposal.diagnosis, None, reply)
    try:
        changes, change = check_proposal(current, proposal, failed)
        revision = Revision(
            version=current.version + 1,
            kind=_kind(proposal),
            change=change,
            reason=proposal.diagnosis,
            evidence=list(proposal.evidence),
            source=f"reflection:{reflector}",
        )
        written = library.write_next(current, changes, revision)
    except (ProposalRejected, ConfigError) as exc:
        return ReflectionOutcome("REJECTED", str(exc), None, reply)
    return ReflectionOutcome("UPDATE", change, written, reply)
