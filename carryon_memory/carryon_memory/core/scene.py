"""Scene memory (`scene.md`): one section per location, shared by every user.

    # Scene memory

    ## kitchen_counter
    - contents: carrot under pink_cover, plate, meat in plate
    - observed: 2026-11-30T09:00:00Z
    - source: initial

`contents` is a comma-separated list of items (an item may carry a relation such as
`carrot under pink_cover`; items never contain commas). `observed` is an ISO 8601 UTC
time (`never` when not observed), `source` what observed it. Other keys (e.g. a
`description`) are kept in the file but not served.

Item matching (MOVE_ITEM, REMOVE_ITEM): an entry is the item when it equals it or starts
with it followed by a space — `carrot` matches `carrot under pink_cover`, not `carrots`.
"""

from __future__ import annotations

import datetime as dt

from carryon_memory.core import validate
from carryon_memory.core.errors import InvalidArgument, NotFound
from carryon_memory.core.markdown import SectionDoc, fold
from carryon_memory.core.types import Location, Problem, SceneOp, SceneUpdate

SCENE_FILE = "scene.md"
SCENE_TITLE = "Scene memory"
CONTENTS, OBSERVED, SOURCE = "contents", "observed", "source"
NEVER = "never"


def format_time(seconds: float) -> str:
    """ISO 8601 UTC, `Z` suffix, microseconds only when needed; `never` for 0."""
    if seconds <= 0.0:
        return NEVER
    stamp = dt.datetime.fromtimestamp(round(seconds, 6), tz=dt.UTC)
    text = stamp.strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".")
    return text + "Z"


def parse_time(text: str) -> float:
    """Inverse of `format_time`; a time without zone is UTC. ValueError when unreadable."""
    text = text.strip()
    if text in ("", NEVER):
        return 0.0
    stamp = dt.datetime.fromisoformat(text)
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return stamp.timestamp()


def split_contents(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def join_contents(items: tuple[str, ...]) -> str:
    return ", ".join(items)


def matches(entry: str, item: str) -> bool:
    """Whether a contents entry is `item` (possibly with a relation after it)."""
    return fold(entry) == fold(item) or fold(entry).startswith(fold(item) + " ")


def locations(doc: SectionDoc) -> tuple[list[Location], list[Problem]]:
    """The locations of a scene document in file order, plus problems with their values."""
    found: list[Location] = []
    problems: list[Problem] = []
    for section in doc.sections.values():
        observed_s = 0.0
        observed = section.entries.get(OBSERVED)
        if observed is not None:
            try:
                observed_s = parse_time(observed.value)
            except ValueError:
                problems.append(
                    Problem(doc.file, observed.line + 1, f"observed {observed.value!r}: expected an ISO 8601 time")
                )
                continue
        contents = section.entries.get(CONTENTS)
        source = section.entries.get(SOURCE)
        found.append(
            Location(
                name=section.name,
                contents=split_contents(contents.value) if contents else (),
                observed_s=observed_s,
                source=source.value if source else "",
            )
        )
    return found, problems


def write_location(doc: SectionDoc, location: Location) -> None:
    """Write contents, observed and source of `location` into its section (created when new)."""
    doc.set(location.name, CONTENTS, join_contents(location.contents))
    doc.set(location.name, OBSERVED, format_time(location.observed_s))
    doc.set(location.name, SOURCE, location.source)


def check_update(update: SceneUpdate, index: int) -> SceneUpdate:
    """Validate one update; names are stripped. InvalidArgument names the update index."""
    where = f"updates[{index}]"
    try:
        op = SceneOp(update.op)
    except ValueError:
        raise InvalidArgument(f"{where}: unknown op {update.op}; one of {[o.name for o in SceneOp]}") from None
    try:
        source = validate.source(update.source)
        if op == SceneOp.SET_CONTENTS:
            items = tuple(validate.item(item) for item in update.contents)
            return SceneUpdate(op, validate.location(update.location), items, "", update.observed_s, source)
        if update.contents:
            raise InvalidArgument(f"contents are only used by SET_CONTENTS, not {op.name}")
        item = validate.item(update.item)
        if op == SceneOp.MOVE_ITEM:
            return SceneUpdate(op, validate.location(update.location), (), item, update.observed_s, source)
        if update.location:
            raise InvalidArgument("REMOVE_ITEM takes no location (the item is removed wherever it is)")
        return SceneUpdate(op, "", (), item, update.observed_s, source)
    except InvalidArgument as exc:
        raise InvalidArgument(f"{where}: {exc}") from None


def apply_update(
    current: dict[str, Location], update: SceneUpdate, now: float
) -> list[tuple[Location | None, Location]]:
    """Apply one validated update to `current` (fold(name) -> Location, changed in place).

    Returns (before, after) per location changed. The location the observation was made
    at (SET_CONTENTS, the target of MOVE_ITEM) gets the observation time and source;
    locations an item merely left keep theirs. NotFound when REMOVE_ITEM names an item
    that is nowhere in scene memory.
    """
    observed = update.observed_s if update.observed_s > 0.0 else now
    changed: list[tuple[Location | None, Location]] = []
    if update.op != SceneOp.SET_CONTENTS:
        for name, location in sorted(current.items()):
            if update.op == SceneOp.MOVE_ITEM and fold(name) == fold(update.location):
                continue
            kept = tuple(entry for entry in location.contents if not matches(entry, update.item))
            if kept != location.contents:
                after = Location(location.name, kept, location.observed_s, location.source)
                changed.append((location, after))
                current[name] = after
        if update.op == SceneOp.REMOVE_ITEM:
            if not changed:
                raise NotFound(f"item {update.item!r} is not in scene memory")
            return changed
    before = current.get(fold(update.location))
    name = before.name if before else update.location
    if update.op == SceneOp.SET_CONTENTS:
        contents = update.contents
    else:
        kept = tuple(e for e in (before.contents if before else ()) if not matches(e, update.item))
        contents = (*kept, update.item)
    after = Location(name, contents, observed, update.source)
    current[fold(name)] = after
    changed.append((before, after))
    return changed
