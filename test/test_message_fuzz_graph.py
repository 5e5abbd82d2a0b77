"""Issue 43: nothing a message holds crashes a node. sim_node and shield_node (sim profile)
and arm_adapter_node (robot profile, with the fake controller) run in their own processes;
a probe (carryon_bench/fuzz_probe.py) finds every topic and service they take by graph
introspection and sends each malformed variants of its type, made generically from the
message definitions (bench/fuzz_messages.py): non-ASCII, very long, NUL and control-character
strings, NaN / infinite / huge numbers and integer limits, empty, oversized and mismatched
sequences, unknown image encodings, and raw payloads with invalid UTF-8 or cut short.

Afterwards every node is the same process, alive and answering `get_status`; the drivers
said why they refused chunks on driver/rejections, the shield answered malformed chunks
with REJECTED_INVALID events, services answered every request with a status, and each
node's status counts the messages it refused."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from carryon_bringup.core.graph import GraphSpec
from carryon_bringup.graph_run import GraphRun
from carryon_common.core.processes import stop_process
from carryon_interfaces.msg import ShieldEvent

pytestmark = pytest.mark.graph

SIM_NODES = ("sim_node", "shield_node")


def _fuzz(graph: GraphRun, namespace: str, nodes: tuple[str, ...], objects: str, log: Path) -> dict[str, Any]:
    pids = graph.node_pids()
    command = [sys.executable, "-m", "carryon_bench.fuzz_probe", "--namespace", namespace, "--objects", objects]
    command += [arg for name in nodes for arg in ("--node", f"{name}={pids[name]}")]
    done = subprocess.run(command, env=graph.env, capture_output=True, text=True, timeout=240, check=False)
    log.write_text(done.stderr)
    assert done.returncode == 0 and done.stdout, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout)
    result["pids_before"], result["pids_after"] = pids, graph.node_pids()
    return result


def _assert_survived(result: dict[str, Any], nodes: tuple[str, ...]) -> None:
    assert not result["dead"], result["dead"]
    assert all(result["alive"].values()), result["alive"]
    assert result["pids_after"] == result["pids_before"], "a node was restarted"
    for name in nodes:
        status = result["statuses"][name]
        assert status is not None, f"{name} no longer answers get_status"
        refused = [b for b in status["backends"] if b.startswith("refused messages=")]
        assert refused, (name, status["backends"])  # the node counts what it refused
    for service, answers in result["services"].items():
        assert all(status is not None for _label, status, _message in answers), (service, answers)


def test_malformed_messages_of_every_type_leave_every_node_alive(config_dir: Path, tmp_path: Path) -> None:
    spec = GraphSpec.load(config_dir)
    with ExitStack() as stack:
        sim = stack.enter_context(GraphRun(spec, tmp_path / "sim", only=list(SIM_NODES)))
        arm = stack.enter_context(GraphRun(spec, tmp_path / "arm", profile="robot", only=["arm_adapter_node"]))
        controller_log = stack.enter_context((tmp_path / "controller.log").open("wb"))
        controller = subprocess.Popen(
            [sys.executable, "-m", "carryon_arm.fake_controller"],
            env={**arm.env, "CARRYON_CONFIG_DIR": str(config_dir)},
            stdout=controller_log,
            stderr=subprocess.STDOUT,
        )
        stack.callback(stop_process, controller)
        sim.wait_ready(timeout_s=120.0)
        arm.wait_ready(timeout_s=60.0)
        sim_result = _fuzz(sim, spec.namespace, SIM_NODES, "bowl", tmp_path / "sim_probe.log")
        arm_result = _fuzz(arm, spec.namespace, ("arm_adapter_node",), "cube", tmp_path / "arm_probe.log")
        (tmp_path / "fuzz.json").write_text(json.dumps({"sim": sim_result, "arm": arm_result}, indent=1))
        assert sim.process is not None and sim.process.poll() is None, sim.output()[-4000:]
        assert arm.process is not None and arm.process.poll() is None, arm.output()[-4000:]
    _assert_survived(sim_result, SIM_NODES)
    _assert_survived(arm_result, ("arm_adapter_node",))
    assert sum(sim_result["topics"].values()) > 300 and sum(arm_result["topics"].values()) > 100
    # Refusals with their reasons: the drivers on driver/rejections (chunks on shield/chunk,
    # e-stop states), the shield in its events (a malformed chunk is REJECTED_INVALID).
    assert any("chunk" in r for r in sim_result["rejections"]), sim_result["rejections"][:20]
    assert any("chunk" in r for r in arm_result["rejections"]), arm_result["rejections"][:20]
    invalid = [reason for decision, reason in sim_result["events"] if decision == ShieldEvent.DECISION_REJECTED_INVALID]
    assert len(invalid) > 20, sim_result["events"][:20]
    # What used to kill sim_node (a negative seed: numpy raised) or wreck its world (a NaN
    # displacement) is refused as an invalid argument, with the field named.
    answers = {label: (status, message) for label, status, message in sim_result["services"]["/carryon/sim/reset"]}
    assert answers["seed: min"][0] == 1 and "seed" in answers["seed: min"][1], answers["seed: min"]
    answers = {label: (status, message) for label, status, message in sim_result["services"]["/carryon/sim/perturb"]}
    assert answers["displacement.x: NaN"][0] == 1, answers["displacement.x: NaN"]
