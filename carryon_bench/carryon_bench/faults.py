"""`carryon bench faults`: the safety probes of issue 19 against a running graph (sim_node,
shield_node, policy_node, recorder_node in their own processes, `carryon up` with its keys).

Each trial sets the arm moving with a chunk through the shield, then:

* **estop**: engages the e-stop as `carryon estop` does (shield and driver at once); the
  time to the arm at rest is measured;
* **freeze**: freezes the shield (SIGSTOP) mid-chunk; the driver must stop the arm on the
  missing heartbeat, whatever its queue holds; then thaws it;
* **forged**: with the arm at rest, publishes on shield/chunk an unsigned chunk, one signed
  with another key and a replay of a chunk the shield released; any of them moving the
  tool by more than 5 mm counts as executed (the driver's refusals are kept beside);
* **forged release**: with the e-stop engaged, publishes an unsigned and a wrongly signed
  release on estop/state and a replay of the shield's own last release, then a chunk signed
  with the run's real key straight on shield/chunk; the arm moving counts as a failure;
* **restart**: kills the shield (SIGKILL); its restart policy brings it back, and it must
  come back engaged and release nothing until the operator releases it;
* **cli**: `carryon policy run` with a long budget, then policy_node killed (SIGKILL): the
  seconds until the CLI exits, and its exit code; and SIGTERM to the CLI itself: the
  seconds until it exits, and whether the goal stopped;
* **memory names**, **cross-user writes**, **unauthenticated requests** (bench/faults_requests.py)
  against memory_node and planner_node in a second graph, unsigned releases against this one;
* **audit**: forged decisions must be audited as forged by recorder_node (bench/faults_audit.py);
* **inputs** (issue 43, bench/faults_inputs.py): a rogue task, a reset and replay, a second
  publisher on a shield input, malformed messages of every type to sim_node and shield_node;
* **robot** (bench/faults_robot.py): forged joint states and malformed messages against the
  robot profile's arm_adapter_node and a fake controller, and the profile started without keys.

Times are simulation seconds from the fault to the first of 0.25 s in which the tool moved
less than 0.5 mm. The shield grounds obstacles with the simulator's own masks (`sim_truth`,
an oracle): this benchmark is about the stop path, not about perception.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from carryon_bench.core.bench import BENCHMARKS, Benchmark, BenchOptions, BenchResult, percentile
from carryon_bench.faults_audit import audited, publish_forged_decisions
from carryon_bench.faults_inputs import input_metrics, input_probes
from carryon_bench.faults_probe import EXECUTED_M, FaultProbe
from carryon_bench.faults_requests import memory_probes, unsigned_release
from carryon_bench.faults_robot import robot_probes
from carryon_bringup.core.graph import GraphSpec
from carryon_bringup.graph_run import GraphRun
from carryon_bringup.up import load_spec

NODES = ["sim_node", "shield_node", "policy_node", "recorder_node"]
REFUSAL_WAIT_S = 10.0  # longest wait for the driver's refusal of a forged chunk


def _config_with_restarts(config_dir: Path, folder: Path, restarts: int) -> Path:
    """A copy of the config whose graph.yaml restarts shield_node and policy_node after SIGKILL."""
    copy = folder / "config"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(config_dir, copy)
    graph_file = copy / "graph.yaml"
    data = yaml.safe_load(graph_file.read_text())
    for node in ("shield_node", "policy_node"):
        data["nodes"][node]["restart"] = {"max_restarts": restarts, "delay_s": 0.5}
    graph_file.write_text(yaml.safe_dump(data, sort_keys=False))
    return copy


def _stop_trial(probe: FaultProbe, fault: Callable[[], None], after: Callable[[], None]) -> float:
    if not probe.start_moving():
        raise RuntimeError(
            f"the arm did not move through the shield (driver: {probe.rejections[-3:]}; shield: {probe.events[-3:]})"
        )
    fault_s = probe.fresh_clock()
    fault()
    stop_s = probe.time_to_rest(fault_s)
    after()
    probe.spin(1.0)
    return stop_s


def _forged_trials(probe: FaultProbe, trials: int) -> list[dict[str, Any]]:
    """Forged chunks published straight on shield/chunk, each with the arm at rest: its
    kind, whether it moved the tool, and the driver's refusals that followed it."""
    from carryon_common import signing

    outcomes: list[dict[str, Any]] = []
    for _ in range(trials):
        if not probe.start_moving():  # a chunk the shield released: its signed copy is replayed below
            raise RuntimeError("the arm did not move through the shield")
        replay = probe.released[-1]
        wrong = signing.sign_msg(os.urandom(32), probe.chunk(20, 0.0025), "shield/chunk")
        for kind, forged in (("unsigned", probe.chunk(20, 0.0025)), ("other key", wrong), ("replay", replay)):
            # At rest first: a loaded machine's slow simulation may still run the released chunk.
            if not probe.spin(30.0, probe.still):
                raise RuntimeError("the arm did not come to rest within 30 s, before a forged chunk")
            start, seen = probe.tool(), len(probe.rejections)
            probe.forged_pub.publish(forged)
            probe.spin(1.5)
            # The driver's refusal of this chunk may come later on a loaded machine (the simulator's
            # executor busy rendering): wait for it, else the next trial would be credited with it.
            mine = f"chunk {forged.chunk_id}:"
            probe.spin(REFUSAL_WAIT_S, lambda m=mine, n=seen: any(r.startswith(m) for r in probe.rejections[n:]))
            moved = float(np.linalg.norm(probe.tool() - start)) > EXECUTED_M
            outcomes.append({"kind": kind, "moved": moved, "driver": probe.rejections[seen:]})
    return outcomes


def _forged_release_trials(probe: FaultProbe, trials: int) -> tuple[int, int]:
    """(moved, trials): with the e-stop engaged, forged releases then a forged chunk."""
    from carryon_common import signing
    from carryon_interfaces.msg import EstopState

    moved = 0
    for _ in range(trials):
        releases = [m for m in probe.estop_states if not m.active and m.signature]
        genuine = releases[-1] if releases else None
        probe.estop(True, "bench: forged release trial")
        for key in (None, os.urandom(32)):
            forged = EstopState(active=False, reason="forged", source="intruder")
            forged.header.stamp.sec = int(probe.sim_now)
            probe.forged_estop_pub.publish(signing.sign_msg(key, forged, "estop/state"))
        if genuine is not None:
            probe.forged_estop_pub.publish(genuine)  # a replay of the shield's own earlier release
        probe.spin(0.5)
        start = probe.tool()
        # A chunk signed with the run's real key, straight to the driver: only the driver's own
        # e-stop stands between it and the arm (the shield is engaged too, and would not release it).
        probe.forged_pub.publish(signing.sign_msg(probe.key, probe.chunk(20, 0.0025), "shield/chunk"))
        probe.spin(1.5)
        moved += int(float(np.linalg.norm(probe.tool() - start)) > EXECUTED_M)
        probe.estop(False, "bench: end of trial")
        probe.spin(0.5)
    return moved, trials


def _restart_trials(probe: FaultProbe, trials: int) -> tuple[int, int]:
    """(came back engaged and released nothing, trials) for SIGKILL of the shield."""
    good = 0
    for _ in range(trials):
        pid = probe.graph.node_pids()["shield_node"]
        seen = len(probe.estop_states)
        os.kill(pid, signal.SIGKILL)
        back = probe.spin(60.0, lambda pid=pid: probe.graph.node_pids().get("shield_node", pid) != pid)
        back = back and probe.spin(60.0, lambda seen=seen: len(probe.estop_states) > seen)
        engaged = back and probe.estop_states[-1].active and "restarted" in probe.estop_states[-1].reason
        start = probe.tool()
        probe.policy_pub.publish(probe.chunk(20, 0.0025))
        probe.spin(2.0)
        still = float(np.linalg.norm(probe.tool() - start)) < EXECUTED_M
        good += int(bool(engaged) and still)
        probe.estop(False, "bench: operator release after the restart")
        probe.spin(1.0)
    return good, trials


def _cli_trials(probe: FaultProbe, config: Path, trials: int) -> dict[str, list[float]]:
    """Seconds until `carryon policy run` exits after policy_node is killed, and after the
    CLI itself gets SIGTERM; exit codes; chunks the policy sent 2 s after a SIGTERM exit."""
    out: dict[str, list[float]] = {"death_exit_s": [], "death_codes": [], "sigterm_exit_s": [], "sigterm_codes": []}
    out["chunks_after_sigterm"] = []
    cli_args = ["--config-dir", str(config), "policy", "run", "open the pink cover", "--steps", "4000"]
    command = [sys.executable, "-m", "carryon_bringup.cli", *cli_args]
    env = {**probe.graph.env, "NO_COLOR": "1"}
    for kill_node in [True] * trials + [False] * trials:
        seen = probe.policy_chunks
        cli = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            if not probe.spin(60.0, lambda seen=seen: probe.policy_chunks >= seen + 2):
                raise RuntimeError("carryon policy run never got the policy going")
            started = time.monotonic()
            if kill_node:
                pid = probe.graph.node_pids()["policy_node"]
                os.kill(pid, signal.SIGKILL)
            else:
                cli.send_signal(signal.SIGTERM)
            while cli.poll() is None and time.monotonic() - started < 180.0:
                probe.spin(0.05)
            key = "death" if kill_node else "sigterm"
            out[f"{key}_exit_s"].append(time.monotonic() - started if cli.poll() is not None else math.inf)
            out[f"{key}_codes"].append(float(cli.returncode if cli.returncode is not None else -1))
            if kill_node:
                probe.spin(60.0, lambda pid=pid: probe.graph.node_pids().get("policy_node", pid) != pid)
                probe.spin(10.0)  # the new policy_node starts
            else:
                after = probe.policy_chunks
                probe.spin(2.0)
                out["chunks_after_sigterm"].append(float(probe.policy_chunks - after))
        finally:
            if cli.poll() is None:
                cli.kill()
            cli.wait(timeout=10)
    return out


def run(options: BenchOptions) -> BenchResult:
    spec = load_spec(str(options.config_dir) if options.config_dir else None)
    stops, restarts, forged = (options.count(20, 3), options.count(5, 1), options.count(10, 2))
    rounds = options.count(3, 1)  # of malformed messages: ~750 to sim + shield, ~450 to the arm each
    config = _config_with_restarts(spec.config_dir, options.run_dir, 2 * restarts)
    result = BenchResult("faults", options.quick, options.seed)
    own = [s for s in options.sets if s.startswith(("memory_node.", "planner_node."))]
    memory = memory_probes(config, options.run_dir, own)  # first: its own short graph
    sets = ["shield_node.grounder=sim_truth", *options.sets]
    with GraphRun(
        GraphSpec.load(config),
        options.run_dir / "graph",
        only=NODES,
        extra_args=[a for s in sets for a in ("--set", s)],
    ) as graph:
        graph.wait_ready(timeout_s=120.0)
        probe = FaultProbe(graph, spec.namespace)
        try:
            probe.connect(30.0)
            shield = lambda: graph.node_pids()["shield_node"]  # noqa: E731 - a restart changes it
            estop = [
                _stop_trial(probe, lambda: probe.estop(True, "bench"), lambda: probe.estop(False, "bench"))
                for _ in range(stops)
            ]
            freeze = [
                _stop_trial(probe, lambda: os.kill(shield(), signal.SIGSTOP), lambda: os.kill(shield(), signal.SIGCONT))
                for _ in range(stops)
            ]
            forged_chunks = _forged_trials(probe, forged)
            release_moved, release_trials = _forged_release_trials(probe, forged)
            forged_decisions = publish_forged_decisions(probe.session.node, probe.ns, probe.spin)
            engaged, restart_trials = _restart_trials(probe, restarts)
            cli = _cli_trials(probe, config, restarts)
            probe.estop(True, "bench: unsigned releases")
            releases = unsigned_release(graph.domain_id, spec.namespace, options.run_dir)
            probe.estop(False, "bench")
            inputs = input_probes(probe, stops, rounds, options.run_dir)
        finally:
            probe.close()
    robot = robot_probes(GraphSpec.load(config), options.run_dir, stops, rounds)
    audit = audited(options.run_dir / "graph" / "audit.jsonl")
    for name, values, note in (
        ("estop_to_rest", estop, "e-stop at shield and driver (as `carryon estop`) to the arm at rest"),
        ("shield_frozen_to_rest", freeze, "SIGSTOP of shield_node mid-chunk to the arm at rest (heartbeat)"),
    ):
        ms = [v * 1000 for v in values]
        result.add(f"{name}_p50", percentile(ms, 50), "ms", f"{note}; {len(ms)} trials, goal <= 200 ms")
        result.add(f"{name}_p99", percentile(ms, 99), "ms")
        result.add(f"{name}_max", max(ms), "ms")
    executed, note = sum(o["moved"] for o in forged_chunks), f"of {len(forged_chunks)} (unsigned, other key, replay)"
    result.add("forged_chunks_executed", executed, "chunks", note)
    result.add(
        "forged_release_moved", release_moved, "trials", f"of {release_trials} (forged and replayed releases + chunks)"
    )
    note = f"of {forged_decisions} on the decision topics + the forged releases; flagged as forged: {audit['flagged']}"
    result.add("forged_decisions_audited_as_node", audit["as_node"], "entries", note)
    result.add("estop_survived_restart", engaged, "trials", f"of {restart_trials} SIGKILLs of shield_node")
    for key, note in (
        ("death_exit_s", "`carryon policy run` exits after SIGKILL of policy_node, goal <= 5 s"),
        ("sigterm_exit_s", "`carryon policy run` exits after SIGTERM to it"),
    ):
        result.add(f"cli_{key.removesuffix('_s')}_max", max(cli[key]), "s", f"{note}; {len(cli[key])} trials")
    codes = sorted({int(c) for c in cli["death_codes"] + cli["sigterm_codes"]})
    result.add("cli_chunks_after_sigterm", sum(cli["chunks_after_sigterm"]), "chunks", f"exit codes {codes}")
    locked = [n for n, row in memory["names"].items() if row["problems"] or not row["plain_write_ok"]]
    result.add("memory_locked_by_name", len(locked), "probes", f"of {len(memory['names'])}: {', '.join(locked)}")
    cross = memory["cross_user"]
    note = f"of 3 attacks (bob's value, a section bob, a summary); own facts stored: {cross['own_facts_stored']}"
    result.add("cross_user_writes", len(cross["writes"]), "lines", note)
    refused = [*memory["operators"]["requests"].values(), *releases.values()]
    accepted = sum(1 for row in refused if row.get("accepted") or row.get("released"))
    note = f"of {len(refused)} (memory writes and reads, Assist, e-stop releases: unsigned, by an unknown operator, "
    note += "or by one bound to another user)"
    result.add("unauthenticated_accepted", accepted, "requests", note)
    input_metrics(result, inputs, robot)
    result.details.update(
        inputs=inputs,
        robot=robot,
        estop_to_rest_s=estop,
        shield_frozen_to_rest_s=freeze,
        cli=cli,
        memory=memory,
        releases=releases,
        audit=audit,
        forged_chunks=forged_chunks,
    )
    return result


BENCHMARKS.register(
    "faults",
    Benchmark("faults", "e-stop and frozen-shield stop times, forged chunks and releases, shield restarts", run),
)
