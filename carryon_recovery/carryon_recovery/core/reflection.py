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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from carryon_common.core.errors import CarryOnError, ConfigError
from carryon_common.core.llm import ChatMessage, LlmClient, LlmError
from carryon_recovery.core.library import Revision, SkillLibrary, SkillVersion, Strategy

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
4. A parameter revision changes exactly one listed parameter to a value inside its range.
   A strategy revision changes retries_with_renewed_perception (0-3) or candidate_order.
5. Answer NO_UPDATE when the evidence is insufficient, contradictory, or no listed
   parameter or strategy can reasonably address what was measured.
6. evidence: quote the attempt ids and the measurements your diagnosis rests on.
7. `resume` hands the arm back to the VLA, holding the object at the stand-off pose above
   the destination, and the VLA finishes the task from there. An attempt that resumed with
   every operation passed, yet whose task was not completed, failed after the hand-back.
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
    images: list[str] = Field(default_factory=list)  # paths of the images saved with the attempt


class Proposal(BaseModel):
    """The reflector's answer."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    decision: Literal["UPDATE", "NO_UPDATE"]
    diagnosis: str = Field(min_length=1, max_length=600)
    evidence: list[str] = Field(default_factory=list, max_length=12)
    kind: Literal["parameter", "strategy", ""] = ""
    parameter: str = ""
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


def build_messages(version: SkillVersion, attempts: Sequence[Attempt]) -> list[ChatMessage]:
    """System (rules + schema) and user (the current version and the attempts) messages."""
    schema = json.dumps(Proposal.model_json_schema(), sort_keys=True, separators=(",", ":"))
    params = [
        f"- {name}: {p.value} (allowed {p.min} .. {p.max}){' — ' + p.description if p.description else ''}"
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
        for op in attempt.operations:
            lines.append(
                f"- {op.op}: {'ok' if op.ok else 'FAILED'}; planned {json.dumps(op.planned)}; "
                f"measured {json.dumps(op.measured)}{'; ' + op.note if op.note else ''}"
            )
        if attempt.images:
            lines.append(f"- images (unverified views): {', '.join(attempt.images)}")
    return [ChatMessage("system", f"{RULES}\nSchema:\n{schema}\n"), ChatMessage("user", "\n".join(lines))]


def check_proposal(version: SkillVersion, proposal: Proposal) -> tuple[dict[str, Any], str]:
    """(changes to apply, change description) for an UPDATE; ProposalRejected otherwise."""
    if not proposal.evidence:
        raise ProposalRejected("an UPDATE must cite evidence (attempt ids and measurements)")
    if proposal.kind == "parameter":
        if proposal.parameter not in version.parameters:
            raise ProposalRejected(
                f"unknown parameter {proposal.parameter!r} (known: {', '.join(sorted(version.parameters))})"
            )
        if proposal.value is None:
            raise ProposalRejected(f"parameter {proposal.parameter!r}: no value given")
        current = version.parameters[proposal.parameter]
        if not current.min <= proposal.value <= current.max:
            raise ProposalRejected(
                f"parameter {proposal.parameter!r}: {proposal.value} is outside its allowed range "
                f"[{current.min}, {current.max}]"
            )
        if proposal.value == current.value:
            raise ProposalRejected(f"parameter {proposal.parameter!r} is already {current.value}: nothing changes")
        parameters = {name: p.model_dump() for name, p in version.parameters.items()}
        parameters[proposal.parameter]["value"] = proposal.value
        return {"parameters": parameters}, f"{proposal.parameter} {current.value} -> {proposal.value}"
    if proposal.kind == "strategy":
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
    raise ProposalRejected("an UPDATE must say kind 'parameter' or 'strategy'")


def failed_attempts(attempts: Sequence[Attempt], skill: str) -> list[Attempt]:
    """The attempts of `skill` after which the task is known not to have been completed
    (an attempt whose outcome nobody learned may have succeeded), at most the review's number."""
    return [a for a in attempts if a.skill == skill and a.task_completed is False][:MAX_ATTEMPTS_REVIEWED]


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
            reply = llm.complete(messages, Proposal.model_json_schema())
        except LlmError as exc:
            return ReflectionOutcome("REJECTED", f"reflector unavailable: {exc}", None, "")
        outcome = _judge_reply(library, current, reply, llm.name)
        if outcome.decision != "REJECTED":
            break
        if round_ < repair_rounds:
            rejected.append(outcome.reason)
            again = (
                f"Rejected: {outcome.reason}. Answer again with one JSON object: a revision that follows the rules "
                "(a listed parameter inside its range, or a strategy field), or NO_UPDATE."
            )
            messages = [*messages, ChatMessage("assistant", reply), ChatMessage("user", again)]
    if round_ > 0:
        earlier = "rejected once" if round_ == 1 else f"rejected {round_} times"
        reason = f"{outcome.reason} (after the proposal was {earlier}: {'; '.join(rejected)})"
        outcome = ReflectionOutcome(outcome.decision, reason, outcome.written, outcome.reply)
    return outcome


def _judge_reply(library: SkillLibrary, current: SkillVersion, reply: str, reflector: str) -> ReflectionOutcome:
    """One reply: parsed, checked, and written as the next version when it holds."""
    try:
        proposal = Proposal.model_validate_json(reply.strip().removeprefix("```json").strip("`"))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}" for e in exc.errors())
        return ReflectionOutcome("REJECTED", f"malformed reply: {problems}", None, reply)
    if proposal.decision == "NO_UPDATE":
        return ReflectionOutcome("NO_UPDATE", proposal.diagnosis, None, reply)
    try:
        changes, change = check_proposal(current, proposal)
        revision = Revision(
            version=current.version + 1,
            kind=proposal.kind or "parameter",
            change=change,
            reason=proposal.diagnosis,
            evidence=list(proposal.evidence),
            source=f"reflection:{reflector}",
        )
        written = library.write_next(current, changes, revision)
    except (ProposalRejected, ConfigError) as exc:
        return ReflectionOutcome("REJECTED", str(exc), None, reply)
    return ReflectionOutcome("UPDATE", change, written, reply)
