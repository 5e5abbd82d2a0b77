"""The memory context as the planner sees it (paper §B.1): compact Markdown.

    ## User memory: alice
    ### diet
    - preference: vegetarian
    ### drink
    - wish: tea (temporary, this request only)
    ## Scene memory
    - kitchen_counter: carrot under pink_cover, plate (observed 2026-11-30T09:00:00Z by initial)

Only the requested user's facts appear, grouped under that user; scene memory is
shared. The order is deterministic and independent of how the files are laid out:
entities, keys and locations sorted case-insensitively (contents keep their order,
which can carry meaning). Temporary facts of the request are merged in and marked; one
that overrides a remembered value says so.

Size: `estimate_tokens` is ceil(characters / 4), the usual rule of thumb for English
text with GPT-style BPE tokenizers. It is an estimate for budgeting the prompt, not a
tokenizer: real counts differ by model (roughly ±25 % on this kind of text).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from carryon_memory.core.markdown import fold
from carryon_memory.core.scene import format_time
from carryon_memory.core.types import Fact, Location

TEMPORARY = "temporary, this request only"


def estimate_tokens(text: str) -> int:
    """Approximate LLM tokens of `text`: ceil(chars / 4)."""
    return math.ceil(len(text) / 4)


def ordered_facts(facts: Sequence[Fact]) -> list[Fact]:
    """Facts in rendering order: by entity, then key (case-insensitive, then exact)."""
    return sorted(facts, key=lambda f: (fold(f.entity), f.entity, fold(f.key), f.key))


def render_context(
    user_id: str,
    facts: Sequence[Fact],
    temporary: Sequence[Fact],
    scene: Sequence[Location],
    *,
    known_user: bool = True,
    note: str = "",
) -> str:
    """Markdown for the planner prompt; `user_id` "" renders scene memory only."""
    lines: list[str] = []
    if user_id:
        lines.append(f"## User memory: {user_id}")
        if note:
            lines.append(f"({note})")
        durable = {(fold(f.entity), fold(f.key)): f for f in facts}
        extra = {(fold(f.entity), fold(f.key)): f for f in temporary}
        merged = [extra.get(k, f) for k, f in durable.items()] + [f for k, f in extra.items() if k not in durable]
        if not merged:
            lines.append("(no facts remembered yet)" if not known_user else "(no facts)")
        entity = None
        for fact in ordered_facts(merged):
            if fold(fact.entity) != entity:
                entity = fold(fact.entity)
                lines.append(f"### {fact.entity}")
            line = f"- {fact.key}: {fact.value}"
            if not fact.durable:
                remembered = durable.get((fold(fact.entity), fold(fact.key)))
                suffix = f"; remembered: {remembered.value}" if remembered else ""
                line += f" ({TEMPORARY}{suffix})"
            lines.append(line)
    lines.append("## Scene memory")
    if not scene:
        lines.append("(no locations remembered)")
    for location in sorted(scene, key=lambda loc: (fold(loc.name), loc.name)):
        contents = ", ".join(location.contents) if location.contents else "(empty)"
        if location.observed_s > 0.0:
            seen = f"observed {format_time(location.observed_s)}" + (
                f" by {location.source}" if location.source else ""
            )
        else:
            seen = "not observed yet" + (f", from {location.source}" if location.source else "")
        lines.append(f"- {location.name}: {contents} ({seen})")
    return "\n".join(lines) + "\n"
