"""Safety-critical facts are protected: an allergy or a diet is weakened or replaced only
when the user says so in the request, never by the summariser or by a plan that inferred
it from something else.

A stored fact is *safety-critical* when its text rules something out (an allergy, a diet,
an intolerance, "never pork": core/constraints.py reads it). A write to the same entity and
key *weakens* it when the new value rules out less than the old one ("allergic to sesame"
-> "none", "vegan" -> "vegetarian"). Such a write is kept only when the request itself lifts
the constraint in so many words: a lifting phrase ("no longer", "not ... any more",
"outgrew", "can eat ... now") and a word of what is lifted (the old value's words or the
kind). Everything else is refused, with a note for the log and the audit; writes that add
or tighten a constraint always pass. The plan's reply says which were lifted and which
kept (`confirm_in_reply`), and the audit log has the notes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from carryon_planner.core.plan import Plan, UpdateUser

if TYPE_CHECKING:
    from carryon_planner.core.wishes import StatedWish

_LIFTING = re.compile(
    r"\b(?:no longer|not\b.*\b(?:any ?more|now)|any ?more|isn'?t|aren'?t|am not|'m not|not allergic|"
    r"outgrew|grew out of|can (?:now )?(?:eat|have|drink)|stopped being|quit being|gave up being|"
    r"no more|not (?:a )?(?:vegetarian|vegan|pescatarian|halal|kosher))\b"
)
_WORD = re.compile(r"[a-z0-9]+")
_FILLER = {"a", "an", "the", "to", "of", "and", "or", "food", "allergy", "allergic", "preference", "diet", "note"}

_REPLY_LIMIT: int = Plan.model_json_schema()["properties"]["reply"]["maxLength"]
Reader = Callable[[str], set[str]]  # what a fact's text rules out (kinds and words)


class _Fact(Protocol):
    @property
    def entity(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def value(self) -> str: ...


Write = TypeVar("Write", bound=_Fact)


def weakened(old: str, new: str, rules_out: Reader) -> set[str]:
    """What `old` rules out that `new` no longer does."""
    return rules_out(old) - rules_out(new)


def lifted_by_request(request: str, old: str, lost: set[str]) -> bool:
    """Whether the request itself says the constraint is lifted: a lifting phrase and a word
    of the old value or of what is lost."""
    text = request.lower()
    if not _LIFTING.search(text):
        return False
    said = set(_WORD.findall(text.replace("_", " ")))
    named = {w for w in _WORD.findall(old.lower().replace("_", " ")) if w not in _FILLER}
    named |= {w for item in lost for w in _WORD.findall(item.lower().replace("_", " "))}
    return bool(said & named)


def _verdict(write: _Fact, current: dict[tuple[str, str], str], rules_out: Reader, request: str | None) -> str:
    """ "keep" (nothing is weakened), "lift" (the request lifts it) or "refuse"."""
    old = current.get((write.entity.lower(), write.key.lower()))
    lost = weakened(f"{write.entity} {write.key}: {old}", f"{write.entity} {write.key}: {write.value}", rules_out)
    if old is None or not lost:
        return "keep"
    return "lift" if request is not None and lifted_by_request(request, old, lost) else "refuse"


def guard_writes(
    writes: Sequence[Write],
    stored: Iterable[tuple[str, str, str]],
    rules_out: Reader,
    *,
    request: str | None,
    who: str,
) -> tuple[list[Write], list[str]]:
    """(the writes to apply, one note per write refused). `request`: the user's own words
    that may lift a constraint (None: nothing can, e.g. for the summariser); `who` names
    the writer in the notes."""
    current = {(e.lower(), k.lower()): v for e, k, v in stored}
    kept: list[Write] = []
    notes: list[str] = []
    for write in writes:
        verdict = _verdict(write, current, rules_out, request)
        old = current.get((write.entity.lower(), write.key.lower()))
        if verdict == "keep":
            kept.append(write)
        elif verdict == "lift":
            kept.append(write)
            notes.append(f"{who} lifted {write.entity}.{write.key} ({old!r} -> {write.value!r}) as the user said")
        else:
            notes.append(
                f"{who} may not weaken {write.entity}.{write.key} ({old!r} -> {write.value!r}): the user did not "
                "say so in this request; kept as it was"
            )
    return kept, notes


def confirmed(
    writes: Iterable[_Fact], stored: Iterable[tuple[str, str, str]], rules_out: Reader, request: str
) -> list[str]:
    """What the reply tells the user about their protected facts the plan writes: a lifted
    constraint is confirmed, one the request does not lift is said to be kept."""
    current = {(e.lower(), k.lower()): v for e, k, v in stored}
    lines = []
    for write in writes:
        verdict, old = (
            _verdict(write, current, rules_out, request),
            current.get((write.entity.lower(), write.key.lower())),
        )
        what = f"{write.entity} {write.key}".replace("_", " ")
        if verdict == "lift":
            lines.append(f"Noted: your {what} is now '{write.value}' (it was '{old}').")
        elif verdict == "refuse":
            lines.append(f"I kept your {what} as '{old}': say so in so many words to change it.")
    return lines


def confirm_in_reply(plan: Plan, stored: Iterable[tuple[str, str, str]], rules_out: Reader, request: str) -> Plan:
    """`plan` whose reply confirms each protected fact it lifts, and says which it may not."""
    writes = [op for op in plan.memory_operations if isinstance(op, UpdateUser)]
    lines = confirmed(writes, stored, rules_out, request) if plan.refusal is None else []
    if not lines:
        return plan
    return plan.model_copy(update={"reply": f"{plan.reply} {' '.join(lines)}"[:_REPLY_LIMIT]})


def in_force(
    own: Sequence[tuple[str, str, str]], wish: StatedWish | None, request: str, rules_out: Reader
) -> list[tuple[str, str, str]]:
    """The user's facts as they hold for this request: a lasting revision the request states
    ("I'm vegetarian now, not vegan any more"; "I'm allergic to sesame as well") replaces its
    fact, unless it would weaken a constraint the request does not lift in so many words."""
    facts = list(own)
    if wish is None or not wish.durable:
        return facts
    current = {(e.lower(), k.lower()): v for e, k, v in facts}
    if _verdict(wish, current, rules_out, request) == "refuse":
        return facts
    same = (wish.entity.lower(), wish.key.lower())
    kept = [(e, k, v) for e, k, v in facts if (e.lower(), k.lower()) != same]
    return [*kept, (wish.entity, wish.key, wish.value)]


def fact_guard(
    stored: Sequence[tuple[str, str, str]], rules_out: Reader, request: str | None, who: str
) -> Callable[[list[Write]], tuple[list[Write], list[str]]]:
    """guard_writes bound to the user's stored facts, for memory_ops' writers."""

    def guard(writes: list[Write]) -> tuple[list[Write], list[str]]:
        return guard_writes(writes, stored, rules_out, request=request, who=who)

    return guard
