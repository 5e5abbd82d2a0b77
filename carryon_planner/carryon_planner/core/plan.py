"""The plan schema the LLM must answer with (paper appendix A, F.2), and its parser.

The schema is a pydantic model; `plan_json_schema()` exports it for the LLM's JSON mode.
Parsing is strict: malformed JSON, unknown fields, wrong types or missing fields raise
PlanParseError with every problem listed, so the repair loop can hand them back.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from carryon_common.core.errors import CarryOnError
from carryon_common.core.subtask import Subtask, SubtaskKind

# The bounds are in the patterns too: llama.cpp's grammar converter reads a string's
# pattern and then ignores its length limits (the 1.5B wrote 45-character subtask ids).
Name = Annotated[str, Field(max_length=64, pattern=r"^[A-Za-z0-9_ -]{0,64}$")]
SubtaskId = Annotated[str, Field(min_length=1, max_length=16, pattern=r"^[A-Za-z0-9_-]{1,16}$")]


class PlanParseError(CarryOnError):
    """The LLM's reply is not a plan; `problems` lists each reason."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("not a valid plan: " + "; ".join(problems))


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PlannedSubtask(_Strict):
    """One subtask. kind: vla (a skill-library instruction for the VLA), observe (look at
    `target` location from its endpoint and report), say (tell the user `objective`),
    control (a named control skill)."""

    id: SubtaskId
    kind: Literal["vla", "observe", "say", "control"]
    objective: str = Field(max_length=300, description="What should be true afterwards, in words.")
    instruction: str = Field("", max_length=200, description="vla: copied verbatim from the skill library.")
    target: Name = Field("", description="Object acted on (vla) or location looked at (observe).")
    source: Name = Field("", description="Named location the target comes from.")
    destination: Name = Field("", description="Location or container it should end up in.")
    depends_on: list[SubtaskId] = Field(default_factory=list, max_length=16)
    condition: str = Field(
        "", max_length=120, description='Observable condition to run it, e.g. "carrot under pink_cover" ("" = always).'
    )

    def as_subtask(self) -> Subtask:
        """This validated entry as the one subtask type the execution loop takes."""
        fields = self.model_dump()
        return Subtask(**{**fields, "kind": SubtaskKind(self.kind), "depends_on": tuple(self.depends_on)})


class UpdateUser(_Strict):
    """Remember a fact about the active user. durable=False: a one-off wish, kept only
    for this request."""

    op: Literal["update_user"]
    entity: Name
    key: Name
    value: str = Field(max_length=200)
    durable: bool


class UpdateScene(_Strict):
    """Record what is at a location (set_contents) or that an item moved (move_item)."""

    op: Literal["update_scene"]
    action: Literal["set_contents", "move_item", "remove_item"]
    location: Name = ""
    contents: list[Annotated[str, Field(max_length=80)]] = Field(default_factory=list, max_length=32)
    item: Name = ""
    before_subtask: SubtaskId | None = Field(
        None, description="Apply before this subtask starts (e.g. the next physical step after an observation)."
    )


MemoryOperation = Annotated[UpdateUser | UpdateScene, Field(discriminator="op")]


class Plan(_Strict):
    """The planner's answer to one request."""

    reply: str = Field(min_length=1, max_length=600, description="What the assistant says to the user.")
    subtasks: list[PlannedSubtask] = Field(default_factory=list, max_length=24)
    memory_operations: list[MemoryOperation] = Field(default_factory=list, max_length=16)
    refusal: str | None = Field(None, max_length=300, description="Why the request is refused (then no subtasks).")

    @property
    def physical(self) -> list[PlannedSubtask]:
        """Subtasks that move the arm."""
        return [s for s in self.subtasks if s.kind in ("vla", "control", "observe")]


def plan_json_schema(
    instructions: Sequence[str] = (),
    names: Sequence[str] = (),
    *,
    control_skills: Sequence[str] | None = None,
    moves: bool = True,
    locations: Sequence[str] | None = None,
) -> dict[str, Any]:
    """JSON Schema of a plan (for JSON mode / grammar-constrained decoding). With
    `instructions` (the skill library) and `names` (known objects and locations) the
    subtasks' instruction, target, source and destination and scene updates' location are
    narrowed to those values (or "", except a scene update's location, then required and
    one of `locations` when given), so constrained decoding can only copy them verbatim,
    and a condition to the validator's two forms over those names. `control_skills` given
    and empty: the "control" kind is left out (there is nothing it could name). `moves`
    False (a question or a statement: nothing may move): only observe and say subtasks,
    and the memory operations are required, right after the reply, so the model decides
    first what to remember (a grammar decodes the properties in the schema's order,
    required ones first; an optional one it may skip); True, the subtasks are required."""
    schema = copy.deepcopy(_SCHEMA)
    subtask = schema["$defs"]["PlannedSubtask"]["properties"]
    if instructions:
        subtask["instruction"]["enum"] = ["", *sorted(set(instructions))]
    if names:
        allowed = ["", *sorted(set(names))]
        for field in ("target", "source", "destination"):
            subtask[field]["enum"] = allowed
    narrow_shared(schema, subtask["condition"], names, locations=locations, moves=moves)
    if control_skills is not None and not control_skills:
        subtask["kind"]["enum"] = [k for k in subtask["kind"]["enum"] if k != "control"]
    if not moves:
        subtask["kind"]["enum"] = [k for k in subtask["kind"]["enum"] if k in ("observe", "say")]
    else:
        schema["required"] = ["reply", "subtasks"]  # an optional property a grammar may skip
    return schema


def narrow_shared(
    schema: dict[str, Any],
    condition: dict[str, Any],
    names: Sequence[str],
    *,
    locations: Sequence[str] | None,
    moves: bool,
) -> None:
    """What a full plan's and a step plan's schemas narrow alike (core/steps.py): with
    `names`, every scene update's location (required, one of `locations` when given) and
    the `condition` property's two forms over them; `moves` False, the memory operations
    first and required, right after the reply."""
    if names:
        update = schema["$defs"]["UpdateScene"]
        update["properties"]["location"]["enum"] = sorted(set(names if locations is None else locations))
        update["required"] = [*update["required"], "location"]
        pattern = condition_pattern(names)
        if pattern:
            condition["pattern"] = pattern
    if not moves:
        first = ("reply", "memory_operations")
        properties = schema["properties"]
        schema["properties"] = {k: properties[k] for k in (*first, *(k for k in properties if k not in first))}
        schema["required"] = [*first]


CONDITION_RELATIONS = ("under", "in", "on", "at")
CONDITION_STATES = ("present", "absent")


def condition_pattern(names: Sequence[str]) -> str:
    """A regular expression (JSON Schema `pattern`, which llama.cpp's grammar converter
    reads) for "" or a condition the validator reads over `names`: "<name> under|in|on|at
    <name>" or "<name> present|absent". Names a condition cannot spell (spaces, capitals)
    are left out; "" when none is left."""
    usable = sorted({n for n in names if re.fullmatch(r"[a-z0-9_]+", n)})
    if not usable:
        return ""
    either = "(" + "|".join(usable) + ")"
    relation = f"{either} ({'|'.join(CONDITION_RELATIONS)}) {either}"
    state = f"{either} ({'|'.join(CONDITION_STATES)})"
    return f"^(|{relation}|{state})$"


_SCHEMA = Plan.model_json_schema()
_Model = TypeVar("_Model", bound=BaseModel)


def parse_plan(text: str) -> Plan:
    """A Plan from the LLM's reply text. Accepts the JSON object alone or wrapped in a
    ```json fence; anything else raises PlanParseError listing every problem."""
    return parse_model(text, Plan)


def parse_model(text: str, model: type[_Model]) -> _Model:
    """`model` (a plan or a step plan) from the LLM's reply text, as parse_plan reads it."""
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`")
        body = body.removeprefix("json").strip()
    try:
        raw = json.loads(body)
    except json.JSONDecodeError as exc:
        raise PlanParseError([f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"]) from None
    if not isinstance(raw, dict):
        raise PlanParseError([f"expected a JSON object, got {type(raw).__name__}"])
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            where = ".".join(str(p) for p in error["loc"]) or "plan"
            problems.append(f"{where}: {error['msg']}")
        raise PlanParseError(problems) from None


def ancestors(subtask: PlannedSubtask, by_id: Mapping[str, PlannedSubtask]) -> set[str]:
    """Ids of every subtask `subtask` depends on, directly or not (unknown ids ignored)."""
    seen: set[str] = set()
    stack = list(subtask.depends_on)
    while stack:
        current = stack.pop()
        if current in seen or current not in by_id:
            continue
        seen.add(current)
        stack.extend(by_id[current].depends_on)
    return seen


# An observable condition: "carrot under pink_cover" (a relation) or "carrot present".
CONDITION = re.compile(r"^\s*([a-z0-9_]+)\s+(?:is\s+)?(under|in|on|at|inside|near)\s+(?:the\s+)?([a-z0-9_]+)\s*$")
PRESENCE = re.compile(r"^\s*([a-z0-9_]+)\s+(?:is\s+)?(present|visible|absent|missing)\s*$")


def condition_names(condition: str) -> list[str] | None:
    """The names an observable condition reads ("carrot under pink_cover" -> [carrot,
    pink_cover]; "carrot present" -> [carrot]), or None when it is not one."""
    text = condition.lower()
    match = CONDITION.match(text) or PRESENCE.match(text)
    return None if match is None else [match.group(1)] + ([match.group(3)] if match.re is CONDITION else [])


def dependency_cycle(subtasks: list[PlannedSubtask]) -> list[str]:
    graph = {s.id: list(s.depends_on) for s in subtasks}
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt in graph and state.get(nxt) is None:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for node in graph:
        if state.get(node) is None:
            found = visit(node)
            if found:
                return found
    return []
