"""What the planner writes to user and scene memory, and when (paper §3.2, §B).

* After a valid plan: its durable `update_user` facts, and its `update_scene` updates
  (Ask: only those not tied to a later subtask; Assist: every one, before the first
  subtask runs). One-off wishes (durable=false) are never written.
* After a judged success of a VLA subtask with a target and a destination: where the
  target is now (`move_item` at the destination location, or "target in destination" at
  the one location holding the destination).
* After a finished Assist: the lasting facts the summariser proposes (core/summarise.py).

memory_node is reached through the `Memory` protocol, so these rules run the same over
ROS services (planner_node) and in tests (an in-memory fake). A write that memory
refuses or cannot take is not an error of the request: it comes back as a note.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from carryon_common.core.errors import CarryOnError
from carryon_common.core.llm import LlmClient
from carryon_planner.core.plan import Plan, PlannedSubtask, UpdateScene, UpdateUser
from carryon_planner.core.summarise import summarise

SceneAction = Literal["set_contents", "move_item", "remove_item"]


@dataclass(frozen=True)
class StoredFact:
    """One fact of the user's memory as memory_node serves it."""

    entity: str
    key: str
    value: str


@dataclass(frozen=True)
class MemoryContext:
    """memory_node's context for one user: rendered memory (for the prompt), the user's
    facts, and scene memory (location -> items, e.g. "carrot under pink_cover").
    other_users / foreign_values: the ids of the other users and the fact values only
    they hold, for the cross-user checks of the validator and the summariser (never put
    into a prompt)."""

    rendered: str
    facts: tuple[StoredFact, ...] = ()
    scene: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    other_users: tuple[str, ...] = ()
    foreign_values: tuple[str, ...] = ()
    images: tuple[ReferenceImage, ...] = ()  # the user's reference images, when the planner sends them


@dataclass(frozen=True)
class ReferenceImage:
    """A reference image in the user's memory (remember_image): `entity`.`key` is its
    fact, `data` the encoded file (`mime` image/png or image/jpeg)."""

    entity: str
    key: str
    mime: str
    data: bytes


@dataclass(frozen=True)
class FactWrite:
    """A durable user fact to store (an empty value removes the fact)."""

    entity: str
    key: str
    value: str


@dataclass(frozen=True)
class SceneWrite:
    """One scene memory update: set a location's contents, or move / remove one item."""

    action: SceneAction
    location: str
    contents: tuple[str, ...] = ()
    item: str = ""


class ContextUnavailable(CarryOnError):
    """memory_node could not give the context: the request ends with this reason.
    `status`: the memory service's status code, passed through to Ask's answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class Memory(Protocol):
    """memory_node as the planner sees it. Writes return a note for the log and the
    result message ("memory: ...", "memory refused: ...", "memory not updated: ...")."""

    def context(self, user_id: str) -> MemoryContext:
        """The user's context; raises ContextUnavailable."""
        ...

    def update_user(self, user_id: str, facts: Sequence[FactWrite], source: str) -> str: ...

    def update_scene(self, updates: Sequence[SceneWrite], source: str) -> str: ...


def plan_writes(plan: Plan, *, every_scene_update: bool) -> tuple[list[FactWrite], list[SceneWrite]]:
    """The durable user facts and the scene updates of `plan` to write now: scene updates
    not tied to a later subtask, or every one (`every_scene_update`)."""
    facts = [
        FactWrite(op.entity, op.key, op.value)
        for op in plan.memory_operations
        if isinstance(op, UpdateUser) and op.durable
    ]
    scene = [
        SceneWrite(op.action, op.location, tuple(op.contents), op.item)
        for op in plan.memory_operations
        if isinstance(op, UpdateScene) and (every_scene_update or op.before_subtask is None)
    ]
    return facts, scene


FactGuard = Callable[[list[FactWrite]], tuple[list[FactWrite], list[str]]]  # core/protected.py


def apply_plan_memory(
    memory: Memory,
    user_id: str,
    plan: Plan,
    plan_id: str,
    *,
    every_scene_update: bool = False,
    guard: FactGuard | None = None,
) -> list[str]:
    """Write the plan's memory operations (see `plan_writes`); one note per write.
    `guard`: what may not be weakened is left as it was (core/protected.py)."""
    facts, scene = plan_writes(plan, every_scene_update=every_scene_update)
    source = f"planner:{plan_id}"
    notes: list[str] = []
    if guard is not None:
        facts, refused = guard(facts)
        notes += refused
    if facts:
        notes.append(memory.update_user(user_id, facts, source))
    if scene:
        notes.append(memory.update_scene(scene, source))
    return notes


def move_after_success(subtask: PlannedSubtask, scene: Mapping[str, tuple[str, ...]]) -> SceneWrite | str | None:
    """Where a VLA subtask's target is after a judged success: a `move_item` update, a
    note saying why scene memory cannot say (no single location holds the destination),
    or None when the subtask moves nothing to a destination."""
    if not (subtask.target and subtask.destination):
        return None
    if subtask.destination in scene:
        return SceneWrite("move_item", subtask.destination, item=subtask.target)
    holds = [subtask.destination]
    holders = [loc for loc, items in scene.items() if any(i.split()[:1] == holds for i in items)]
    if len(holders) != 1:
        return f"scene memory not updated: no one location holds {subtask.destination}"
    return SceneWrite("move_item", holders[0], item=f"{subtask.target} in {subtask.destination}")


def record_move(memory: Memory, subtask: PlannedSubtask, scene: Mapping[str, tuple[str, ...]], plan_id: str) -> str:
    """Write `move_after_success` to scene memory; the note ("" when nothing moved)."""
    move = move_after_success(subtask, scene)
    if move is None:
        return ""
    if isinstance(move, str):
        return move
    return memory.update_scene([move], f"executive:{plan_id}")


def remember_summary(
    llm: LlmClient,
    memory: Memory,
    *,
    user_id: str,
    request: str,
    plan: Plan,
    context: MemoryContext,
    plan_id: str,
    warn: Callable[[str], None] = lambda _line: None,
    guard: FactGuard | None = None,
) -> str:
    """The summariser (paper §B.2) after a finished plan: lasting facts, checked, stored.
    Returns the note for the result message; a problem is also handed to `warn`."""
    stored = [(f.entity, f.key, f.value) for f in context.facts]
    summary = summarise(
        llm,
        user_id=user_id,
        request=request,
        plan=plan,
        stored=stored,
        other_users=context.other_users,
        foreign_values=context.foreign_values,
    )
    if summary.problem:
        warn(f"{plan_id}: summariser: {summary.problem}")
        return f"summariser: {summary.problem}"
    if not summary.store:
        return "summariser: nothing lasting to remember"
    facts = [FactWrite(op.entity, op.key, op.value) for op in summary.store]
    refused: list[str] = []
    if guard is not None:  # the summariser never weakens an allergy or a diet (core/protected.py)
        facts, refused = guard(facts)
        for line in refused:
            warn(f"{plan_id}: {line}")
    if not facts:
        return "; ".join(refused) or "summariser: nothing lasting to remember"
    note = memory.update_user(user_id, facts, f"summariser:{plan_id}")
    remembered = ", ".join(f"{f.entity} {f.key}: {f.value}" for f in facts)
    return f"summariser remembered {remembered} ({note})" + "".join(f"; {line}" for line in refused)
