"""The graph split over a robot PC and a GPU box (issue 22): two network namespaces of this
machine joined by a link (carryon_bringup/netns.py), DDS discovery over that subnet. The
robot side (simulator, perception, shield, judge, recovery, memory, planner) gets policy
chunks from the GPU side's policy node across the link, and its planner's replies from the
model server there (a stub OpenAI-compatible server in llm_server_node's place, over HTTP);
the link drops for 12 s and the graph lives through it. Needs root for
the namespaces: skipped with the reason otherwise. `carryon bench hosts` measures the same
over many trials and 30 s drops."""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from carryon_bench.hosts import chunk_latency, drop_trials, robot_side, split_graph
from carryon_bringup import netns
from carryon_bringup.core.graph import GraphSpec

UNAVAILABLE = netns.unavailable()  # makes and removes a namespace: once
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"{UNAVAILABLE}")


def test_the_graph_split_over_two_hosts_lives_through_a_link_drop(config_dir: Path, tmp_path: Path) -> None:
    spec = GraphSpec.load(config_dir)
    with netns.TwoHosts() as hosts, split_graph(spec, tmp_path, hosts) as (robot, gpu):
        # Chunks computed on the GPU side are checked and released on the robot side.
        latency = chunk_latency(hosts, robot, steps=48)
        assert latency, "no policy chunk was released across the link"
        print(f"policy chunk -> released across the link: p50 {statistics.median(latency):.1f} ms, n={len(latency)}")
        # The planner on the robot side plans with the model server on the GPU side (HTTP across the link).
        ask = [sys.executable, "-m", "carryon_bringup.cli", "ask", "--user", "alice", "--plan-only"]
        asked = subprocess.run(robot_side(hosts, [*ask, "What do you know about me?"]), env=robot.env,
                               capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        assert asked.returncode == 0 and "served from the GPU box" in asked.stdout, asked.stdout + asked.stderr
        # A 12 s drop: long enough for `carryon status` (about 6 s with a node that does not
        # answer, 8 s and more on a loaded machine) to finish while the link is down; were the
        # link back before its 3 s wait ends, DDS would deliver the request and the answer late.
        # The drop comes 0.2 s after the first chunk released after a reset, while the arm runs
        # it (1 s later, the benchmark's lead, the arm was often still: not explained yet).
        # A trial where the arm was still anyway says nothing about the hold (core/link_drop.py;
        # under a loaded machine's CI the arm was sometimes still 0.2 s after a release): a
        # second trial then, and the assertions hold for the trial that had it moving.
        for _ in range(2):
            [(found, status_named_policy_down)] = drop_trials(hosts, robot, [12.0], lead_s=0.2, settle_s=30.0)
            print(found)
            if found.moving_at_drop:
                break
        assert found.moving_at_drop and found.last_release_s is not None, found  # the policy was moving the arm
        # The arm held soon after the drop: the released chunk ran out, nothing new arrived ...
        assert found.hold_s is not None and found.hold_s < 3.0, found
        # ... `carryon status` on the robot side said the policy node was unreachable ...
        assert status_named_policy_down, found
        # ... and chunks were released again after the link came back, with no node restarted.
        # (within 30 s: a goal request sent during the drop can wait for the client's 20 s timeout)
        assert found.resume_s is not None and found.resume_s < 30.0, found
        for side in (robot, gpu):
            assert not [e for e in side.events() if e["event"] in ("died", "restarting")], side.output()[-3000:]
