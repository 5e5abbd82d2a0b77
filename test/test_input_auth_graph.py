"""Issue 43's probes against sim_node and shield_node in their own processes, by a process
on the same DDS domain that holds no key (carryon_bench/faults_inputs.py):

* an unsigned `shield/set_task` naming the bottle the target and a permitted contact is
  refused, and a chunk driving the hand into the bottle is cut exactly as without it, with
  no contact in the simulator;
* after the operator engaged the e-stop, an unsigned `sim/reset` is refused, and once a
  signed reset has set the driver's clock back to their stamps, a captured signed release
  and a captured signed chunk replayed on the driver's topics move nothing: the driver
  refuses both for their sequence numbers;
* an intruder publishing tool poses makes every chunk fail closed once the shield has
  matched it, naming the topic in its events; chunks pass again once it is gone.

(The same probes with 20 trials each are rows of `carryon bench faults`.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from carryon_bench import faults_inputs
from carryon_bench.faults_probe import FaultProbe
from carryon_bringup.core.graph import GraphSpec
from carryon_bringup.graph_run import GraphRun

pytestmark = pytest.mark.graph


@pytest.fixture(scope="module")
def probe(config_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultProbe]:
    spec = GraphSpec.load(config_dir)
    run_dir = tmp_path_factory.mktemp("input_auth")
    # The shield on the simulator's own masks: this test is about who may set its inputs.
    sets = ["--set", "shield_node.grounder=sim_truth"]
    with GraphRun(spec, run_dir / "graph", only=["sim_node", "shield_node"], extra_args=sets) as graph:
        graph.wait_ready(timeout_s=120.0)
        fault_probe = FaultProbe(graph, spec.namespace)
        try:
            fault_probe.connect(30.0)
            yield fault_probe
        finally:
            fault_probe.close()


def test_a_rogue_task_exempts_nothing(probe: FaultProbe) -> None:
    rows = faults_inputs.rogue_task_trials(probe, trials=2)
    for row in rows:
        assert row["set_task"][0] == 7, row  # STATUS_UNAUTHORIZED
        assert 0 < row["control_released"] < row["total_steps"], row  # the chunk does go into the bottle
        assert row["rogue_released"] <= row["control_released"], row
        assert row["contacts"] == 0, row


def test_reset_and_replay_leave_the_arm_still(probe: FaultProbe) -> None:
    rows = faults_inputs.replay_trials(probe, trials=2)
    for row in rows:
        assert row["unsigned_reset"][0] == 7, row
        assert row["signed_reset_taken"], row
        assert not row["moved"], row
        assert row["refused_as_replay"] >= 1, row


def test_a_second_publisher_on_a_shield_input_fails_closed(probe: FaultProbe) -> None:
    from carryon_common.convert import msg_to_health
    from carryon_interfaces.srv import GetStatus

    (row,) = faults_inputs.second_publisher_trials(probe, trials=1)
    assert row["named"] and "2 publishers on /carryon/ee_pose" in row["reason"], row
    assert row["during_released"] == 0 and row["after_released"] > 0, row
    answer = probe.session.call(GetStatus, probe.ns + "shield_node/get_status", GetStatus.Request(), 10.0)
    assert any(b.startswith("inputs=") for b in msg_to_health(answer.status).backends)
