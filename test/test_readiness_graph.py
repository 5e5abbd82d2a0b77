"""Readiness that means something, across processes (issue 22): the shield answers `ready`
only while a chunk arriving now could be decided, i.e. while perception's frames are fresh.
When perception_node stops (SIGSTOP: a hung process, not a dead one the launcher would see)
the shield turns `degraded` and says why, and it is `ready` again once perception resumes,
with no restart.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from carryon_bringup.core.graph import GraphSpec
from carryon_bringup.graph_run import GraphRun
from carryon_bringup.node import GraphClient
from carryon_common.core.status import NodeHealth, NodeState

pytestmark = pytest.mark.graph

NODES = ("sim_node", "perception_node", "shield_node")


def shield_health(client: GraphClient) -> NodeHealth | None:
    return client.statuses(["shield_node"], wait_s=5.0)["shield_node"]


def wait_for(client: GraphClient, accept: Callable[[NodeHealth], bool], timeout_s: float) -> tuple[bool, list[str]]:
    """Poll the shield's status until `accept` holds; (held, every state/message seen)."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        health = shield_health(client)
        if health is not None:
            line = f"{health.state.name}: {health.message}"
            if not seen or seen[-1] != line:
                seen.append(line)
            if accept(health):
                return True, seen
        time.sleep(0.25)
    return False, seen


def test_the_shield_is_degraded_while_perception_is_stopped_and_ready_again_after(
    config_dir: Path, tmp_path: Path
) -> None:
    spec = GraphSpec.load(config_dir)
    with GraphRun(spec, tmp_path / "run", only=NODES) as graph:
        graph.wait_ready(timeout_s=60.0)
        perception = graph.node_pids()["perception_node"]
        with GraphClient(spec.namespace, 10.0, domain_id=graph.domain_id) as client:
            ok, seen = wait_for(client, lambda h: h.state == NodeState.READY, 90.0)
            assert ok, f"the shield never became ready: {seen}\n{graph.output()[-3000:]}"

            os.kill(perception, signal.SIGSTOP)
            stopped_at = time.monotonic()
            try:
                ok, seen = wait_for(client, lambda h: h.state == NodeState.DEGRADED, 20.0)
                degraded_after_s = time.monotonic() - stopped_at
            finally:
                os.kill(perception, signal.SIGCONT)
            assert ok, f"the shield stayed ready with perception stopped: {seen}"
            last = seen[-1]
            assert "every chunk fails closed" in last, seen
            # It names the stale input and its age (perception relays the depth it segmented).
            assert "from camera" in last and "s old (limit" in last, seen
            assert degraded_after_s < 15.0, degraded_after_s

            ok, seen = wait_for(client, lambda h: h.state == NodeState.READY, 60.0)
            assert ok, f"the shield did not become ready again after perception resumed: {seen}"
        # Nothing was restarted: the same perception process ran throughout.
        assert graph.node_pids()["perception_node"] == perception
        assert not [e for e in graph.events() if e.get("event") in ("died", "restarting")], graph.events()
