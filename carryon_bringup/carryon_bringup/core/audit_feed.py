"""Turns the graph's decision topics into audit log entries (recorder_node writes them).

Only changes are decisions: a new or changed plan, a validator verdict on an LLM round, a
subtask changing state (recovering included), a plan's end, every shield chunk not
released whole, a judge verdict whose status changed, every memory change, the e-stop.
The feed keeps what it has seen so repeats (the judge's periodic verdicts, a plan state
republished for another subtask) are not logged twice. Inputs are plain values, so the
rules are tested without ROS. With a publishers file, a message its node did not sign is
not a decision: it is logged as `forged` (source recorder_node) and changes no state here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

Entry = tuple[str, str, dict[str, Any]]  # (kind, source, data)
FORGED_EVERY_S = 1.0


@dataclass
class AuditFeed:
    plans: dict[str, str] = field(default_factory=dict)  # plan id -> plan json seen
    plan_states: dict[str, tuple[str, str]] = field(default_factory=dict)  # plan id -> (state, message)
    subtasks: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)  # (plan, id) -> (state, message)
    verdicts: dict[str, str] = field(default_factory=dict)  # subtask id -> status
    forged_at: dict[str, float] = field(default_factory=dict)  # topic -> when a forgery was last logged
    forged_left_out: dict[str, int] = field(default_factory=dict)  # topic -> forgeries not logged since

    def plan_state(
        self,
        *,
        plan_id: str,
        user: str,
        request: str,
        state: str,
        message: str,
        reply: str,
        plan_json: str,
        subtasks: Iterable[tuple[str, str, str]],
    ) -> list[Entry]:
        """`subtasks`: (id, state, message) in plan order."""
        out: list[Entry] = []
        if plan_json and self.plans.get(plan_id) != plan_json:
            self.plans[plan_id] = plan_json
            self.subtasks = {k: v for k, v in self.subtasks.items() if k[0] != plan_id}  # a replan starts afresh
            out.append(
                (
                    "plan",
                    "planner_node",
                    {"plan_id": plan_id, "user": user, "request": request, "reply": reply, "plan": plan_json},
                )
            )
        if self.plan_states.get(plan_id) != (state, message):
            self.plan_states[plan_id] = (state, message)
            kind = {
                "validating": "plan.validation",
                "refused": "plan.refused",
                "succeeded": "plan.end",
                "failed": "plan.end",
                "cancelled": "plan.end",
            }.get(state, "plan.state")
            out.append((kind, "planner_node", {"plan_id": plan_id, "state": state, "message": message}))
        for subtask_id, sub_state, sub_message in subtasks:
            key = (plan_id, subtask_id)
            if sub_state == "pending" or self.subtasks.get(key) == (sub_state, sub_message):
                continue
            self.subtasks[key] = (sub_state, sub_message)
            kind = "recovery" if sub_state == "recovering" else "subtask"
            out.append(
                (
                    kind,
                    "planner_node",
                    {"plan_id": plan_id, "subtask": subtask_id, "state": sub_state, "message": sub_message},
                )
            )
        return out

    def verdict(self, subtask_id: str, status: str, reason: str, backend: str) -> list[Entry]:
        if self.verdicts.get(subtask_id) == status:
            return []
        self.verdicts[subtask_id] = status
        return [
            ("verdict", "judge_node", {"subtask": subtask_id, "status": status, "reason": reason, "backend": backend})
        ]

    @staticmethod
    def shield_event(
        *, chunk_id: int, subtask_id: str, decision: str, released: int, total: int, reason: str, obstacle: str
    ) -> list[Entry]:
        if decision == "released_all":
            return []
        return [
            (
                "shield.block",
                "shield_node",
                {
                    "chunk": chunk_id,
                    "subtask": subtask_id,
                    "decision": decision,
                    "released": released,
                    "total": total,
                    "reason": reason,
                    "obstacle": obstacle,
                },
            )
        ]

    @staticmethod
    def memory_change(
        *, version: int, file: str, entity: str, key: str, previous: str, new: str, source: str
    ) -> list[Entry]:
        return [
            (
                "memory.change",
                "memory_node",
                {
                    "version": version,
                    "file": file,
                    "entity": entity,
                    "key": key,
                    "previous": previous,
                    "new": new,
                    "source": source,
                },
            )
        ]

    @staticmethod
    def estop(active: bool, source: str, reason: str) -> list[Entry]:
        return [("estop", "shield_node", {"active": active, "source": source, "reason": reason})]

    def forged(self, *, topic: str, node: str, reason: str, message: str, now_s: float) -> list[Entry]:
        """A message on a decision topic that `node` did not sign (the recorder's DecisionCheck):
        logged as the recorder saw it, never as the node's decision, at most once a second per
        topic (a flood must not fill the disk); `left_out` counts the ones not logged before it."""
        if now_s - self.forged_at.get(topic, -float("inf")) < FORGED_EVERY_S:
            self.forged_left_out[topic] = self.forged_left_out.get(topic, 0) + 1
            return []
        self.forged_at[topic] = now_s
        left_out = self.forged_left_out.pop(topic, 0)
        data = {"topic": topic, "claimed": node, "reason": reason, "message": message[:500], "left_out": left_out}
        return [("forged", "recorder_node", data)]
