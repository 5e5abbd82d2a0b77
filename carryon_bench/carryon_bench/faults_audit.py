"""The audit probe of `carryon bench faults`: messages forged on the decision topics (plan
state, shield events, verdicts, memory changes, the e-stop state) must reach the audit log
as `forged`, never as the decision of the node they claim to come from.

The bench publishes one message on each decision topic unsigned and one signed with a key
the run does not know, each marked with FORGED_MARK in a text field; the forged e-stop
releases of the release trials (unsigned, another key, a replay of the shield's own) come
on top. The recorder logs a forgery at most once a second per topic (`left_out` counts the
rest), so `flagged` adds those up.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

FORGED_MARK = "intruder"


def publish_forged_decisions(node: Any, ns: str, spin: Callable[[float], object]) -> int:
    """Publish the forgeries from `node` (a client node in the graph's domain); how many were sent."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from carryon_common.core import names
    from carryon_common.core.operator_auth import Identity
    from carryon_common.node import latched_qos
    from carryon_common.request_auth import sign_decision
    from carryon_interfaces.msg import EstopState, MemoryChange, PlanState, ShieldEvent, Verdict

    forgeries = (
        (PlanState, names.PLAN_STATE, names.PLANNER_NODE, lambda: PlanState(plan_id=FORGED_MARK, user_id="alice")),
        (
            ShieldEvent,
            names.SHIELD_EVENTS,
            names.SHIELD_NODE,
            lambda: ShieldEvent(decision=ShieldEvent.DECISION_REJECTED_STALE, reason=FORGED_MARK),
        ),
        (
            Verdict,
            names.VERDICT,
            names.JUDGE_NODE,
            lambda: Verdict(subtask_id="s1", status=Verdict.STATUS_SUCCESS, reason=FORGED_MARK),
        ),
        (
            MemoryChange,
            names.MEMORY_CHANGED,
            names.MEMORY_NODE,
            lambda: MemoryChange(file="alice.md", source=FORGED_MARK),
        ),
        (EstopState, names.ESTOP_STATE, names.SHIELD_NODE, lambda: EstopState(active=False, source=FORGED_MARK)),
    )
    publishers = []
    for msg_type, topic, _node, _make in forgeries:
        # The QoS of the genuine publisher: the recorder's subscription to a latched topic
        # would not match a volatile one, and the forgery would be stopped by QoS, not by the audit.
        qos = latched_qos(10) if topic in (names.PLAN_STATE, names.ESTOP_STATE) else 10
        publishers.append(node.create_publisher(msg_type, ns + topic, qos))
    spin(2.0)  # the recorder matches the new publishers
    sent = 0
    for (_type, topic, claimed, make), pub in zip(forgeries, publishers, strict=True):
        stranger = Identity(f"node:{claimed}", Ed25519PrivateKey.generate())  # the right name, an unknown key
        for msg in (make(), sign_decision(stranger, make(), topic)):
            pub.publish(msg)
            sent += 1
            spin(1.1)  # past the recorder's once-a-second limit, so each is its own entry
    return sent


def audited(audit_file: Path) -> dict[str, int]:
    """`as_node`: entries that took a forgery (FORGED_MARK) for a node's decision; `flagged`:
    forgeries logged as such (with those the once-a-second limit left out)."""
    as_node = flagged = 0
    if not audit_file.exists():
        return {"as_node": -1, "flagged": 0}
    for line in audit_file.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry["kind"] == "forged":
            flagged += 1 + int(entry["data"].get("left_out", 0))
        elif FORGED_MARK in json.dumps(entry["data"]):
            as_node += 1
    return {"as_node": as_node, "flagged": flagged}
