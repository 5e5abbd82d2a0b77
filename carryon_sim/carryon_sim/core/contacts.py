"""Ground-truth contacts (the oracle behind the safety-violation metric).

Never used by the shield's or the policy's perception: only by metrics and tests.
Contacts are reported between *objects*: scene object names, `robot` for any robot link
or finger, `table` for the table; a violation of the robot also names the robot's parts that
made it (`robot_part`: hand, fingers, or the arm's link).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import mujoco
import numpy as np

from carryon_common.core import contact_rules as rules
from carryon_common.core.contact_rules import ContactTask, Violation

__all__ = ["ROBOT", "ContactMonitor", "Violation", "grasped_objects", "object_contacts", "robot_part"]

ROBOT = "robot"
_FINGER_BODIES = ("panda_gripper_leftfinger", "panda_gripper_rightfinger")
_SQUEEZE_COS = 0.5  # a finger squeezes what it pushes within 60 degrees of the closing direction


def robot_part(body_name: str) -> str:
    """Which part of the robot a simulator body is: "fingers", "hand", or the arm's link by name."""
    if "finger" in body_name:
        return "fingers"
    if "hand" in body_name or "gripper" in body_name:
        return "hand"
    return body_name


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
    """Objects squeezed between the fingers: touched by both (including their pads) at once,
    each pushing it towards the other (the contact normal within 60 degrees of the closing
    direction). Fingertips pressing down on a plate or a bowl's bottom hold nothing."""
    finger_of_body = _finger_of_body(model)
    left, right = (data.xpos[model.body(name).id] for name in _FINGER_BODIES)
    closing = right - left  # the left finger pushes along it, the right one against it
    closing = closing / max(float(np.linalg.norm(closing)), 1e-9)
    touching: dict[str, set[int]] = {}
    for i in range(data.ncon):
        contact = data.contact[i]
        b1, b2 = int(model.geom_bodyid[contact.geom1]), int(model.geom_bodyid[contact.geom2])
        normal = np.asarray(contact.frame[:3])  # from geom1 to geom2
        for finger_body, other, outward in ((b1, b2, normal), (b2, b1, -normal)):
            touched = object_of_body.get(other)
            if finger_body not in finger_of_body or touched is None or touched in (ROBOT, "table"):
                continue
            finger = finger_of_body[finger_body]
            if float(outward @ closing) * (1.0 if finger == 0 else -1.0) >= _SQUEEZE_COS:
                touching.setdefault(touched, set()).add(finger)
    return {name for name, fingers in touching.items() if len(fingers) == 2}


@dataclass(frozen=True)
class _Body:
    """Where an object is now: its lowest point (z) and its horizontal extent
    (x_min, y_min, x_max, y_max), from its geoms' bounding boxes, metres, world frame."""

    bottom_z: float
    extent: tuple[float, float, float, float]

    def horizontal_m(self, point: np.ndarray) -> float:
        x0, y0, x1, y1 = self.extent
        dx = max(x0 - point[0], 0.0, point[0] - x1)
        dy = max(y0 - point[1], 0.0, point[1] - y1)
        return float(np.hypot(dx, dy))


def _body_of(model: mujoco.MjModel, data: mujoco.MjData, bodies: Sequence[int]) -> _Body | None:
    corners = []
    signs = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], dtype=np.float64)
    for geom in np.flatnonzero(np.isin(model.geom_bodyid, bodies)):
        center, half = model.geom_aabb[geom, :3], model.geom_aabb[geom, 3:]
        local = center + signs * half
        corners.append(data.geom_xpos[geom] + local @ data.geom_xmat[geom].reshape(3, 3).T)
    if not corners:
        return None
    points = np.concatenate(corners)
    low, high = points.min(axis=0), points.max(axis=0)
    return _Body(float(low[2]), (float(low[0]), float(low[1]), float(high[0]), float(high[1])))


@dataclass
class ContactMonitor:
    """Records every contact of the robot (or an object it holds) that the current task
    does not permit, by the rules of carryon_common.core.contact_rules, judged per contact
    point: the target, destination and permitted contacts anywhere; the target's support
    only in the patch at the target. A contact that lasts is one violation, from when it
    starts until it ends.

    `known`: the scene's object names (a task's source that is not one is a place, held by
    the support surfaces)."""

    task: ContactTask = field(default_factory=ContactTask)
    known: frozenset[str] = frozenset()
    violations: list[Violation] = field(default_factory=list)
    # Control steps on which a contact (mover, touched) was permitted, by rule: what the
    # exemptions were used for (diagnostics; the demo's run log lists them).
    permitted_steps: Counter[tuple[str, str, rules.Rule]] = field(default_factory=Counter)
    _active: dict[tuple[str, str], int] = field(default_factory=dict)  # (mover, touched) -> index in violations
    _supports: rules.SupportTracker = field(default_factory=rules.SupportTracker)  # what the target was lifted from
    _ended: list[Violation] = field(default_factory=list)

    def set_task(self, task: ContactTask, now_s: float, known: Iterable[str] | None = None) -> None:
        """A new subtask from `now_s` (simulation seconds) on: violations under way end
        there, and its rules judge every contact afresh. `known`: the scene's object names
        (None: unchanged)."""
        self.task = task
        if known is not None:
            self.known = frozenset(known)
        self._close_all(now_s)

    def finish(self, now_s: float) -> list[Violation]:
        """End every violation under way at `now_s` (a reset, shutdown); returns all that
        ended since the last `take_ended`."""
        self._close_all(now_s)
        return self.take_ended()

    def take_ended(self) -> list[Violation]:
        """Violations that ended since the last call (complete: end time, peak force)."""
        ended, self._ended = self._ended, []
        return ended

    def _close(self, key: tuple[str, str], now_s: float) -> None:
        index = self._active.pop(key)
        self.violations[index] = replace(self.violations[index], end_s=now_s)
        self._ended.append(self.violations[index])

    def _close_all(self, now_s: float) -> None:
        for key in list(self._active):
            self._close(key, now_s)

    def update(self, model: mujoco.MjModel, data: mujoco.MjData, object_of_body: dict[int, str]) -> list[Violation]:
        """Check the current contacts; return the violations that started now."""
        task = self.task
        carried = grasped_objects(model, data, object_of_body)
        movers = {ROBOT, *carried}
        target_bodies = [b for b, name in object_of_body.items() if name == task.target and name]
        target = _body_of(model, data, target_bodies) if target_bodies else None
        contacts = []
        for i in range(data.ncon):
            contact = data.contact[i]
            a = object_of_body.get(int(model.geom_bodyid[contact.geom1]))
            b = object_of_body.get(int(model.geom_bodyid[contact.geom2]))
            if a and b and a != b:
                robot_body = contact.geom1 if a == ROBOT else contact.geom2 if b == ROBOT else -1
                part = robot_part(model.body(int(model.geom_bodyid[robot_body])).name) if robot_body >= 0 else ""
                contacts.append((i, a, b, np.array(contact.pos, dtype=np.float64), part))

        def resting_on() -> tuple[str, ...]:
            if target is None:
                return ()
            lowest: dict[str, float] = {}
            for _, a, b, pos, _part in contacts:
                if task.target in (a, b) and ROBOT not in (a, b):
                    (other,) = {a, b} - {task.target}
                    lowest[other] = min(lowest.get(other, np.inf), float(pos[2]) - target.bottom_z)
            return rules.resting_on(lowest)

        support = self._supports(task, known=self.known, held=task.target in carried, resting_on=resting_on)
        force = np.zeros(6)
        now: dict[tuple[str, str], float] = {}
        parts: dict[tuple[str, str], set[str]] = {}
        permitted: set[tuple[str, str, rules.Rule]] = set()
        for i, a, b, pos, part in contacts:
            for mover, other in ((a, b), (b, a)):
                if mover not in movers or other in movers:
                    continue
                in_patch = target is not None and rules.in_support_patch(
                    float(pos[2]) - target.bottom_z, target.horizontal_m(pos)
                )
                rule = rules.rule_for(task, other, support=support, in_patch=in_patch)
                if rule is not None:
                    permitted.add((mover, other, rule))
                    continue
                mujoco.mj_contactForce(model, data, i, force)
                now[(mover, other)] = now.get((mover, other), 0.0) + abs(float(force[0]))
                if mover == ROBOT:
                    parts.setdefault((mover, other), set()).add(part)
        self.permitted_steps.update(permitted)
        t = float(data.time)
        for key in [k for k in self._active if k not in now]:
            self._close(key, t)
        started = []
        for (mover, other), newtons in sorted(now.items()):
            index = self._active.get((mover, other))
            touching = tuple(sorted(parts.get((mover, other), ())))
            if index is None:
                self._active[(mover, other)] = len(self.violations)
                violation = Violation(t, mover, other, task.subtask_id, newtons, robot_parts=touching)
                self.violations.append(violation)
                started.append(violation)
            else:
                before = self.violations[index]
                merged = tuple(sorted({*before.robot_parts, *touching}))
                self.violations[index] = replace(before, force_n=max(newtons, before.force_n), robot_parts=merged)
        return started
