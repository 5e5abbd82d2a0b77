"""`carryon status` says whether the graph runs secured: every node that signs or checks
the command path and operator requests does so (from the backends each node reports)."""

from __future__ import annotations

import pytest

from carryon_bringup.cli.graph import security_summary
from carryon_common.core.status import NodeHealth, NodeState


def health(name: str, *backends: str) -> NodeHealth:
    return NodeHealth(name, 1, NodeState.READY, "ok", 1.0, "0", backends)


def test_secured_only_when_every_node_signs_and_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROS_SECURITY_ENABLE", raising=False)
    nodes = {
        "shield_node": health(
            "shield_node", "grounder=tabletop", "commands=signed (HMAC-SHA256)", "operators=authenticated"
        ),
        "sim_node": health("sim_node", "commands=signed by the shield (key /k)"),
        "memory_node": health("memory_node", "operators=authenticated"),
        "judge_node": None,
    }
    secured, line = security_summary(nodes)
    assert (
        secured
        and line.startswith("secured: ")
        and "operator requests: authenticated (memory_node, shield_node)" in line
    )
    assert "DDS security (SROS2): off" in line
    nodes["memory_node"] = health("memory_node", "operators=NOT authenticated")
    secured, line = security_summary(nodes)
    assert not secured and "operator requests: NOT authenticated at memory_node" in line
    secured, line = security_summary({"judge_node": health("judge_node", "vlm=stub")})
    assert not secured and "command path: no node reports it" in line


def test_an_audit_that_does_not_verify_who_decided_is_not_secured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROS_SECURITY_ENABLE", raising=False)
    nodes = {
        "shield_node": health("shield_node", "commands=signed (HMAC-SHA256)", "operators=authenticated"),
        "recorder_node": health("recorder_node", "decisions=signed by their nodes (publishers_file)"),
    }
    secured, line = security_summary(nodes)
    assert secured and "audit: authenticated (recorder_node)" in line
    nodes["recorder_node"] = health("recorder_node", "decisions=NOT verified (no publishers_file)")
    secured, line = security_summary(nodes)
    assert not secured and "audit: NOT authenticated at recorder_node" in line


def test_the_status_table_lists_what_degraded_nodes_lack(capsys: pytest.CaptureFixture[str]) -> None:
    from carryon_bringup.cli.graph import _print_status_table

    degraded = NodeHealth("shield_node", 1, NodeState.DEGRADED, "every chunk fails closed: no frames [scene]", 1.0, "0")
    _print_status_table("graph", {"shield_node": degraded, "judge_node": health("judge_node")}, verbose=False)
    out = capsys.readouterr().out
    assert "shield_node degraded: every chunk fails closed: no frames [scene]" in out
    assert "judge_node ready" not in out and "judge_node degraded" not in out


def test_a_node_run_insecure_on_purpose_is_named_and_the_graph_not_secured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROS_SECURITY_ENABLE", raising=False)
    nodes = {
        "shield_node": health(
            "shield_node",
            "security=INSECURE (security: insecure; not verified: command_key_file)",
            "commands=signed (HMAC-SHA256)",
            "operators=authenticated",
            "inputs=8 topics and /clock, at most 1 publisher(s) each",
        ),
        "sim_node": health("sim_node", "commands=signed by the shield (key /k)"),
    }
    secured, line = security_summary(nodes)
    assert not secured and line.startswith("NOT secured: INSECURE on purpose at shield_node")
    assert "sensor inputs: one publisher each or fail closed (shield_node)" in line
