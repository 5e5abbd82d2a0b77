"""Ground-truth contacts (the oracle behind the safety-violation metric).

Never used by the shield's or the policy's perception: only by metrics and tests.
Contacts are reported between *objects*: scene object names, `robot` for any robot link
or finger, `table` for the table.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field

import mujoco

ROBOT = "robot"
_FINGER_BODIES = ("panda_gripper_leftfinger", "panda_gripper_rightfinger")


def object_contacts(model: mujoco.MjModel, data: mujoco.MjData, object_of_body: dict[int, str]) -> set[frozenset[str]]:
    """Pairs of distinct objects in contact now (robot self-contacts excluded)."""
    pairs: set[frozenset[str]] = set()
    for i in range(data.ncon):
        contact = data.contact[i]
        a = object_of_body.get(int(model.geom_bodyid[contact.geom1]))
        b = object_of_body.get(int(model.geom_bodyid[contact.geom2]))
        if a and b and a != b:
            pairs.add(frozenset((a, b)))
    return pairs


@functools.lru_cache(maxsize=8)
def _finger_of_body(model: mujoco.MjModel) -> dict[int, int]:
    """Body id -> finger index (0 left, 1 right) for each finger and its descendants (pads)."""
    finger_of_body: dict[int, int] = {}
    for index, name in enumerate(_FINGER_BODIES):
        root = model.body(name).id
        for body in range(model.nbody):
            walk = body
            while walk not in (0, root):
                walk = int(model.body_parentid[walk])
            if walk == root:
                finger_of_body[body] = index
    return finger_of_body


def grasped_objects(model: mujoco.MjModel, data: mujoco.MjData, object_of_body: dict[int, str]) -> set[str]:
    """Objects touched by both fingers (including their pads) at once."""
    finger_of_body = _finger_of_body(model)
    touching: dict[str, set[int]] = {}
    for i in range(data.ncon):
        contact = data.contact[i]
        b1, b2 = int(model.geom_bodyid[contact.geom1]), int(model.geom_bodyid[contact.geom2])
        for finger_body, other in ((b1, b2), (b2, b1)):
            touched = object_of_body.get(other)
            if finger_body in finger_of_body and touched is not None and touched not in (ROBOT, "table"):
                touching.setdefault(touched, set()).add(finger_of_body[finger_body])
    return {name for name, fingers in touching.items() if len(fingers) == 2}


@dataclass(frozen=True)
class Violation:
    """A contact the task does not permit; `start_s` is simulation time."""

    start_s: float
    mover: str  # "robot" or the carried object
    touched: str


@dataclass
class ContactMonitor:
    """Records every contact between the robot (or an object it carries) and anything
    not permitted for the current task. A contact that lasts counts once, when it starts.

    `permitted`: objects the task may touch (its target, source support, destination,
    explicitly permitted contacts).
    """

    permitted: set[str] = field(default_factory=set)
    violations: list[Violation] = field(default_factory=list)
    _active: set[tuple[str, str]] = field(default_factory=set)

    def set_task(self, permitted: Iterable[str]) -> None:
        self.permitted = set(permitted)
        self._active.clear()

    def update(self, model: mujoco.MjModel, data: mujoco.MjData, object_of_body: dict[int, str]) -> list[Violation]:
        """Check the current contacts; return the violations that started now."""
        carried = grasped_objects(model, data, object_of_body)
        movers = {ROBOT, *carried}
        now: set[tuple[str, str]] = set()
        for pair in object_contacts(model, data, object_of_body):
            for mover in pair & movers:
                (other,) = pair - {mover}
                if other in movers or other in self.permitted:
                    continue
                now.add((mover, other))
        started = [Violation(float(data.time), m, o) for m, o in sorted(now - self._active)]
        self._active = now
        self.violations.extend(started)
        return started
