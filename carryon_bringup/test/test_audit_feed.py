"""What the recorder writes to the audit log: decisions and changes, not repeats."""

from __future__ import annotations

from carryon_bringup.core.audit_feed import AuditFeed


def plan(feed: AuditFeed, state: str, message: str, plan_json: str, subtasks: list[tuple[str, str, str]]) -> list[str]:
    entries = feed.plan_state(plan_id="p1", user="alice", request="Serve me food", state=state, message=message,
                              reply="ok", plan_json=plan_json, subtasks=subtasks)  # fmt: skip
    return [kind for kind, _source, _data in entries]


def test_plans_validation_subtasks_and_recoveries_are_logged_once() -> None:
    feed = AuditFeed()
    assert plan(feed, "planning", "planning", "", []) == ["plan.state"]
    assert plan(feed, "validating", "validator: round 1 rejected", "{}", [("s1", "pending", "")]) == [
        "plan", "plan.validation"]  # fmt: skip
    assert plan(feed, "executing", "executing", "{}", [("s1", "active", "running")]) == ["plan.state", "subtask"]
    assert plan(feed, "executing", "executing", "{}", [("s1", "active", "running")]) == []  # a repeat
    assert plan(feed, "executing", "executing", "{}", [("s1", "recovering", "attempt 1: grasp")]) == ["recovery"]
    # A replan (new plan JSON) runs its subtasks afresh: the same states are logged again.
    assert plan(feed, "executing", "executing", '{"v": 2}', [("s1", "active", "running")]) == ["plan", "subtask"]
    assert plan(feed, "succeeded", "done", '{"v": 2}', [("s1", "succeeded", "judge: ok")]) == ["plan.end", "subtask"]


def test_verdicts_are_logged_when_their_status_changes_and_releases_are_not_blocks() -> None:
    feed = AuditFeed()
    assert len(feed.verdict("s1", "running", "a", "geometric")) == 1
    assert feed.verdict("s1", "running", "b", "geometric") == []
    assert len(feed.verdict("s1", "success", "c", "geometric")) == 1
    released = {"chunk_id": 1, "subtask_id": "s1", "released": 8, "total": 8, "reason": "", "obstacle": ""}
    assert feed.shield_event(decision="released_all", **released) == []
    ((kind, _source, data),) = feed.shield_event(decision="retreat", **{**released, "released": 3})
    assert kind == "shield.block" and data["released"] == 3


def test_forged_messages_are_logged_as_the_recorder_saw_them_at_most_once_a_second() -> None:
    feed = AuditFeed()
    first = feed.forged(topic="estop/state", node="shield_node", reason="not signed", message="m", now_s=10.0)
    assert first == [
        (
            "forged",
            "recorder_node",
            {"topic": "estop/state", "claimed": "shield_node", "reason": "not signed", "message": "m", "left_out": 0},
        )
    ]
    for now in (10.2, 10.5, 10.9):  # a flood: counted, not logged
        assert feed.forged(topic="estop/state", node="shield_node", reason="x", message="m", now_s=now) == []
    assert feed.forged(topic="judge/verdict", node="judge_node", reason="x", message="m", now_s=10.5)  # per topic
    (entry,) = feed.forged(topic="estop/state", node="shield_node", reason="x", message="m" * 900, now_s=11.1)
    assert entry[2]["left_out"] == 3 and len(entry[2]["message"]) == 500
    assert not feed.plans and not feed.verdicts  # nothing a forgery says becomes the feed's state
