"""The planner's context for one request (paper §3.2, appendix A, B.1, F.2): the rules,
the active user's memory and scene memory (rendered by memory_node), the endpoints and
the skill library. Deterministic: the same inputs give the same messages, byte for byte.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from carryon_common.core.llm import ChatMessage, ImagePart
from carryon_planner.core.memory_ops import ReferenceImage, StoredFact
from carryon_planner.core.plan import plan_json_schema
from carryon_planner.core.steps import named_in, steps_json_schema
from carryon_planner.core.usual import Remembered

IMAGE_PREFIX = "images/"  # where memory_node stores reference images (a fact's value is the path)

_HEAD = """You are the planner of a robot arm that assists one user at a time. Answer every
request with ONE JSON object that follows the plan schema below, and nothing else.

Rules:
1. The memory shown is the active user's; use only it. Never use or mention anything you
   may know about other users.
2. When the user states a lasting preference ("I'm vegetarian", "remember ..."), add an
   update_user operation with durable=true, with the entity and key memory already has
   for it (a new value replaces the old one). A one-off wish for this request only
   ("today I'd like tea") gets durable=false. When the user says where something is now,
   add update_scene move_item with item = that object and location = where it is now.
"""

_FULL = """3. Do not move anything unless the user asked for an action. Questions and statements are
   answered with a reply (and memory operations), not with vla subtasks.
4. vla subtasks copy their instruction VERBATIM from the skill library. If no listed
   instruction does what is needed, say so in the reply instead of inventing one.
5. Scene memory says where to look, not what is there now. Before acting on something
   remembered at a location, add an observe subtask for that location and make the
   physical subtasks depend on it. A subtask that only makes sense if something is true
   carries a condition such as "carrot under pink_cover".
"""

_STEPS = """3. Do not move anything unless the user asked for an action. Questions and statements are
   answered with a reply (and memory operations), without steps.
4. A step's "do" copies an instruction VERBATIM from the skill library, or is
   "observe <location>". If no listed instruction does what is needed, say so in the reply
   instead of inventing one. Steps run one after the other, in the order given.
5. Scene memory says where to look, not what is there now. Before acting on something
   remembered at a location, make "observe <location>" the first step. A step that only
   makes sense if something is true has "when", such as "carrot under pink_cover".
"""

_TAIL = """6. When an observation (listed under "Observed since the last plan") contradicts or adds
   to scene memory, add update_scene set_contents for that location in this plan.
7. The reply and the {what} describe the same actions; name the objects you act on.
8. If the request conflicts with the user's preferences (e.g. meat for a vegetarian),
   do not plan it: explain why in the reply, and set refusal when nothing else is done.
9. When memory says what the user likes or uses (their usual drink, sandwich filling,
   snack, what they pack for an activity), act on exactly those items, not on everything
   the library offers.
"""

_FULL_EXAMPLES = """
Example (a different scene and library; use only the names given below the request):
request "Bring me my cup", memory "shelf: cloth, cup under cloth",
library "lift the cloth", "put the cup on the tray":
{"reply":"I will look at the shelf, lift the cloth if your cup is under it, then put the cup on the tray.",
"subtasks":[{"id":"s1","kind":"observe","objective":"see what is on the shelf","target":"shelf"},
{"id":"s2","kind":"vla","objective":"the cup is uncovered","instruction":"lift the cloth","target":"cloth",
"source":"shelf","depends_on":["s1"],"condition":"cup under cloth"},
{"id":"s3","kind":"vla","objective":"the cup is on the tray","instruction":"put the cup on the tray",
"target":"cup","source":"shelf","destination":"tray","depends_on":["s2"]}],
"memory_operations":[],"refusal":null}
"""

_STEPS_EXAMPLES = """
Examples (other scenes and libraries; use only the names given below the request):
request "Bring me my cup", memory "shelf: cloth, cup under cloth",
library "lift the cloth", "put the cup on the tray":
{"reply":"I will look at the shelf, lift the cloth if your cup is under it, then put the cup on the tray.",
"steps":[{"do":"observe shelf"},{"do":"lift the cloth","when":"cup under cloth"},
{"do":"put the cup on the tray"}],"memory_operations":[],"refusal":null}
request "Make my usual drink", memory "drink: usual: tea with honey; counter: tea_bag, honey, coffee, sugar, cup",
library "put the tea bag in the cup", "put the coffee in the cup", "put the sugar in the cup",
"put the honey in the cup":
{"reply":"I will look at the counter, then put the tea bag and the honey in your cup.",
"steps":[{"do":"observe counter"},{"do":"put the tea bag in the cup"},{"do":"put the honey in the cup"}],
"memory_operations":[],"refusal":null}
"""

_STATEMENTS = """Statements move nothing: "I take oat milk from now on" (memory "milk: choice: whole"):
{"reply":"Noted: oat milk from now on.","memory_operations":[{"op":"update_user","entity":"milk",
"key":"choice","value":"oat milk","durable":true}],"{empty}":[]}
"My scarf is in the drawer now": {"reply":"Noted: your scarf is in the drawer.","memory_operations":
[{"op":"update_scene","action":"move_item","item":"scarf","location":"drawer"}],"{empty}":[]}
"""


def rules(steps: bool = False) -> str:
    """The planner's rules and examples, for full plans or step plans (core/steps.py)."""
    if steps:
        body = _STEPS + _TAIL.format(what="steps") + _STEPS_EXAMPLES + _STATEMENTS.replace("{empty}", "steps")
    else:
        body = _FULL + _TAIL.format(what="subtasks") + _FULL_EXAMPLES + _STATEMENTS.replace("{empty}", "subtasks")
    return _HEAD + body


RULES = rules()


@dataclass(frozen=True)
class LibraryEntry:
    instruction: str
    description: str = ""


@dataclass(frozen=True)
class Endpoint:
    """A named location the arm can look at (observe subtasks)."""

    name: str
    description: str = ""


@dataclass(frozen=True)
class DescribedImage:
    """A reference image named in the request instead of sent: its fact and what the
    user's memory says about the entity (its other facts)."""

    entity: str
    key: str
    description: str


def described_images(facts: Sequence[StoredFact]) -> list[DescribedImage]:
    """The user's image facts, each with the entity's other facts as its description."""
    images = [f for f in facts if f.value.startswith(IMAGE_PREFIX)]
    return [
        DescribedImage(
            f.entity,
            f.key,
            "; ".join(
                f"{o.key}: {o.value}" for o in facts if o.entity == f.entity and not o.value.startswith(IMAGE_PREFIX)
            ),
        )
        for f in images
    ]


_FILLER = frozenset(
    "the and for you your please can could would make get put some want like this that".split(" ")  # noqa: SIM905
)


def _stem(word: str) -> str:
    """A rough stem, enough for a request to meet a fact's key: a plural's s, an -ing
    ("swimming", "swim"; "hiking", "hike"; "running", "run") and a final e dropped."""
    if word.endswith("ing") and len(word) > 5:
        word = word[:-3]
        word = word[:-1] if len(word) > 2 and word[-1] == word[-2] and word[-1] not in "aeiou" else word
    elif word.endswith("s") and len(word) > 3:
        word = word[:-1]
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


def _words(text: str) -> set[str]:
    """Content words, roughly stemmed ("snacks" and "snack", "hike" and "hiking" meet)."""
    words = re.findall(r"[a-z]+", text.lower().replace("_", " "))
    return {_stem(w) for w in words if len(w) > 2 and w not in _FILLER}


@dataclass(frozen=True)
class RelevantFact:
    """A fact of the user's that bears on the request, with the objects its value names:
    `named` when the request names its entity or key ("Make me a sandwich":
    sandwich.filling), else one of the facts that name objects (the request named none)."""

    fact: StoredFact
    objects: tuple[str, ...]
    named: bool = True

    def remembered(self) -> Remembered:
        """The fact as the validator reads it (core/usual.py)."""
        return Remembered(f"{self.fact.entity}.{self.fact.key}: {self.fact.value}", self.objects, self.named)

    def line(self) -> str:
        names = f" (objects: {', '.join(self.objects)})" if self.objects else ""
        return f"- {self.fact.entity}.{self.fact.key}: {self.fact.value}{names}"


def relevant_facts(request: str, facts: Sequence[StoredFact], objects: Sequence[str]) -> list[RelevantFact]:
    """The user's facts the request names by their entity or key, each with the known
    objects its value names; when it names none ("Could you fix me lunch"), the facts
    whose values name objects. Pointed out next to the request: a small model otherwise
    reads past them (it served the whole library for "Make me a sandwich")."""
    asked = _words(request)
    usable = [f for f in facts if not f.value.startswith(IMAGE_PREFIX)]
    named = [
        RelevantFact(f, tuple(named_in(f.value, objects))) for f in usable if asked & _words(f"{f.entity} {f.key}")
    ]
    if named:
        return named
    found = [RelevantFact(f, tuple(named_in(f.value, objects)), named=False) for f in usable]
    return [r for r in found if r.objects]


def warm_up_messages(steps: bool = False) -> list[ChatMessage]:
    """The system message every plan request starts with (rules and schema), and a stub
    user message: what a model server reads ahead of the first request."""
    system = build_messages(request="", user_id="", memory="", endpoints=(), library=(), steps=steps)[0]
    return [system, ChatMessage("user", "(warm-up: answer {})")]


def build_messages(
    *,
    request: str,
    user_id: str,
    memory: str,
    endpoints: Sequence[Endpoint],
    library: Sequence[LibraryEntry],
    control_skills: Sequence[str] = (),
    observations: Mapping[str, Sequence[str]] | None = None,
    images: Sequence[ReferenceImage] = (),
    described: Sequence[DescribedImage] = (),
    ruled_out: Mapping[str, str] | None = None,
    steps: bool = False,
    relevant: Sequence[RelevantFact] = (),
) -> list[ChatMessage]:
    """System message (rules + schema) and user message (context + request). `memory` is
    GetContext.rendered for `user_id` (that user's facts and the shared scene only).
    `images` are attached to the user message, each after a line naming its fact (an
    image-capable endpoint); `described` are named with their descriptions instead.
    `ruled_out`: object -> the preference that excludes it (the taxonomy's reading of the
    user's facts), listed so that the model leaves them out rather than the validator.
    `steps`: the model is asked for a step plan (core/steps.py) instead of a full one.
    `relevant`: the user's facts the request names (relevant_facts), pointed out."""
    shape = steps_json_schema() if steps else plan_json_schema()
    schema = json.dumps(shape, sort_keys=True, separators=(",", ":"))
    system = f"{rules(steps)}\nPlan schema (JSON Schema):\n{schema}\n"
    lines = [f"Active user: {user_id or '(anonymous)'}", "", "## Memory", memory.strip() or "(empty)", ""]
    lines += ["## Endpoints (locations you can observe)"]
    lines += [f"- {e.name}" + (f": {e.description}" if e.description else "") for e in endpoints] or ["(none)"]
    lines += ["", "## Skill library", "VLA instructions (copy verbatim):"]
    for entry in library:
        lines.append(f'- "{entry.instruction}"' + (f" — {entry.description}" if entry.description else ""))
    lines += ["Control skills: " + (", ".join(control_skills) if control_skills else "(none)")]
    if steps:
        lines += ['Other steps: "observe <endpoint>", "control <control skill>".']
    else:
        lines += ["Other subtask kinds: observe (target = an endpoint), say (tell the user the objective)."]
    if ruled_out:
        lines += ["", "## Ruled out by the user's preferences (never serve or use these)"]
        lines += [f"- {name}: {why}" for name, why in sorted(ruled_out.items())]
    if observations:
        lines += ["", "## Observed since the last plan"]
        lines += [f"- {loc}: {', '.join(items) or 'nothing'}" for loc, items in sorted(observations.items())]
    if described:
        lines += ["", "## Reference images (not shown to you; what memory says about each entity)"]
        lines += [f"- {d.entity}.{d.key}: {d.description or 'no description stored'}" for d in described]
    if relevant:
        if all(r.named for r in relevant):
            lines += ["", "## What the user's memory says about this request (act on exactly these)"]
        else:
            lines += ["", "## What the user's memory says they use (act on exactly the one that fits the request)"]
        lines += [r.line() for r in relevant]
    request_lines = ["", "## Request", request.strip()]
    if not images:
        return [ChatMessage("system", system), ChatMessage("user", "\n".join([*lines, *request_lines]))]
    parts: list[str | ImagePart] = ["\n".join([*lines, "", "## Reference images (the user's own things)"])]
    for image in images:
        parts += [f"{image.entity}.{image.key}:", ImagePart.from_bytes(image.data, image.mime)]
    parts.append("\n".join(request_lines).lstrip("\n"))
    return [ChatMessage("system", system), ChatMessage("user", tuple(parts))]
