"""The process supervisor with stand-in node commands (no ROS needed)."""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from carryon_bringup.core import shm
from carryon_bringup.core.graph import NodeLaunch, RestartPolicy
from carryon_bringup.core.supervisor import Supervisor


def launch(name: str, max_restarts: int = 0) -> NodeLaunch:
    return NodeLaunch(name, "pkg", "exe", "carryon", "x:Y", (), RestartPolicy(max_restarts=max_restarts, delay_s=0.0))


def supervisor(tmp_path: Path, scripts: dict[str, str], restarts: dict[str, int] | None = None) -> Supervisor:
    lines: list[tuple[str, str]] = []
    sup = Supervisor(
        [launch(name, (restarts or {}).get(name, 0)) for name in scripts],
        lambda lnch: [sys.executable, "-u", "-c", scripts[lnch.name]],
        env=dict(os.environ),
        log_dir=tmp_path / "logs",
        cwd=tmp_path,
        printer=lambda name, line: lines.append((name, line)),
    )
    sup.lines = lines  # type: ignore[attr-defined]
    return sup


# Ctrl-C raises KeyboardInterrupt as in a node (rclpy installs its own handler), also where the test run
# itself was started in the background with SIGINT ignored (`make test &`), which children inherit.
SLEEPER = (
    "import signal, time\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "print('up', flush=True)\nwhile True: time.sleep(0.1)"
)
CRASHER = "import sys\nprint('loading config', flush=True)\nprint('boom: no such file', flush=True)\nsys.exit(3)"


def wait_for_deaths(sup: Supervisor, timeout_s: float = 5.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        deaths = sup.poll()
        if deaths:
            return deaths
        time.sleep(0.02)
    return []


def test_a_crash_is_reported_with_exit_code_and_last_lines(tmp_path: Path) -> None:
    sup = supervisor(tmp_path, {"ok_node": SLEEPER, "bad_node": CRASHER})
    sup.start_all()
    try:
        deaths = wait_for_deaths(sup)
        assert [d.name for d in deaths] == ["bad_node"]
        death = deaths[0]
        assert death.exit_code == 3 and not death.restarting
        assert death.tail[-1] == "boom: no such file"
        assert "bad_node exited with code 3" in death.describe()
        assert "boom: no such file" in (tmp_path / "logs" / "bad_node.log").read_text()
        deadline = time.monotonic() + 5
        while ("ok_node", "up") not in sup.lines and time.monotonic() < deadline:  # type: ignore[attr-defined]
            time.sleep(0.02)
        assert ("ok_node", "up") in sup.lines  # type: ignore[attr-defined]  # output prefixed per node
        assert not sup.processes["ok_node"].exited()  # the supervisor reports; the caller decides to stop
    finally:
        sup.stop(2.0)


def test_restart_policy_restarts_then_gives_up(tmp_path: Path) -> None:
    sup = supervisor(tmp_path, {"flaky_node": CRASHER}, restarts={"flaky_node": 1})
    sup.start_all()
    first = wait_for_deaths(sup)
    assert first[0].restarting
    second = wait_for_deaths(sup)
    assert not second[0].restarting
    assert sup.processes["flaky_node"].restarts == 1
    sup.stop(1.0)


def test_stop_interrupts_then_kills_and_leaves_no_process(tmp_path: Path) -> None:
    stubborn = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True: time.sleep(0.1)'])\n"
        "print(child.pid, flush=True)\n"
        "while True: time.sleep(0.1)"
    )
    sup = supervisor(tmp_path, {"polite_node": SLEEPER, "stubborn_node": stubborn})
    sup.start_all()
    deadline = time.monotonic() + 10  # both running their loops: an interpreter still starting may miss SIGINT's
    while any(len(p.tail) < 1 for p in sup.processes.values()) and time.monotonic() < deadline:  # clean exit
        time.sleep(0.02)
    grandchild = int(sup.processes["stubborn_node"].tail[0])
    pids = list(sup.pids().values())
    report = sup.stop(2.0)  # a loaded full run saw the polite node take more than 1 s to exit
    assert report.killed == ["stubborn_node"]
    assert report.stopped_cleanly == ["polite_node"]
    assert report.duration_s < 5.0
    time.sleep(0.2)
    for pid in [*pids, grandchild]:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_stale_shared_memory_is_removed_unless_in_use(tmp_path: Path) -> None:
    if not shm.SHM_DIR.is_dir():
        pytest.skip("no /dev/shm on this machine")
    tag = uuid.uuid4().hex[:12]
    stale = shm.SHM_DIR / f"fastdds_test_{tag}_stale"
    used = shm.SHM_DIR / f"fastdds_test_{tag}_used"
    stale.write_bytes(b"x")
    used.write_bytes(b"x")
    with used.open("rb"):  # held open by this (live) process
        assert {stale, used} <= shm.dds_shm_files()
        removed = shm.remove_stale([stale, used])
        assert removed == [stale]
        assert used.exists() and not stale.exists()
    used.unlink()


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="the kernel has no scheduling autogroups")
def test_a_niced_node_weighs_less_where_sessions_share_the_cpu(tmp_path: Path) -> None:
    """Each node has its own session, and sessions share the CPU as equals under autogroup
    scheduling: the niceness that weighs is the session's (/proc/<pid>/autogroup), not only
    the process's own `nice -n`. It is set once the node is ready (Supervisor.settle)."""
    niced = NodeLaunch("niced_node", "pkg", "exe", "carryon", "x:Y", (), RestartPolicy(), nice=10)
    plain = launch("plain_node")
    sup = Supervisor(
        [niced, plain],
        lambda _lnch: [sys.executable, "-u", "-c", SLEEPER],
        env=dict(os.environ),
        log_dir=tmp_path / "logs",
        cwd=tmp_path,
        printer=lambda _name, _line: None,
    )
    sup.start_all()

    def groups() -> dict[str, list[str]]:
        found = {}
        for name, proc in sup.processes.items():
            assert proc.popen is not None
            found[name] = Path(f"/proc/{proc.popen.pid}/autogroup").read_text().split()
        return found

    try:
        starting = groups()  # not niced while starting: its setup does not wait behind the busy nodes
        assert starting["niced_node"][-2:] == ["nice", "0"]
        assert sup.settle(["plain_node"]) == []  # asks for no niceness
        assert sup.settle(["niced_node", "plain_node"]) == ["niced_node"]
        assert sup.settle(["niced_node"]) == []  # once per process
        ready = groups()
        assert ready["niced_node"][-2:] == ["nice", "10"] and ready["plain_node"][-2:] == ["nice", "0"]
        assert ready["niced_node"][0] != ready["plain_node"][0]  # a session each
    finally:
        sup.stop(2.0)
