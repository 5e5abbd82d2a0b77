"""Real-time scheduling of a node's control path (graph.yaml `realtime_priority`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from carryon_common import scheduling
from carryon_common.core.names import REALTIME_PRIORITY_ENV


def test_the_requested_priority_is_read_and_checked() -> None:
    assert scheduling.requested_priority({}) == 0
    assert scheduling.requested_priority({REALTIME_PRIORITY_ENV: ""}) == 0
    assert scheduling.requested_priority({REALTIME_PRIORITY_ENV: " 10 "}) == 10
    with pytest.raises(ValueError, match="not an integer"):
        scheduling.requested_priority({REALTIME_PRIORITY_ENV: "high"})
    with pytest.raises(ValueError, match="out of range"):
        scheduling.requested_priority({REALTIME_PRIORITY_ENV: "120"})


def test_no_priority_asked_for_leaves_scheduling_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object) -> None:
        raise AssertionError("must not be called")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    assert scheduling.apply_realtime_priority(0) == "normal"


def test_without_the_privilege_the_node_runs_normal_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(*_args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    note = scheduling.apply_realtime_priority(10)
    assert note.startswith("normal (SCHED_FIFO 10 not permitted: Operation not permitted")
    assert "rtprio" in note and "docs/robot.md" in note
    assert "real-time priority not set" in capsys.readouterr().err


@pytest.mark.skipif(not hasattr(os, "sched_setscheduler"), reason="no sched_setscheduler on this platform")
def test_fifo_is_set_and_threads_started_afterwards_inherit_it() -> None:
    """In a child process (a real-time test process would outrank the rest of the suite)."""
    code = textwrap.dedent(
        """
        import os, threading
        from carryon_common import scheduling
        print(scheduling.apply_realtime_priority(5))
        seen = []
        worker = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0)))
        worker.start(); worker.join()
        print(os.sched_getscheduler(0) == os.SCHED_FIFO, seen[0] == os.SCHED_FIFO, os.sched_getparam(0).sched_priority)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    note, checks = done.stdout.strip().splitlines()
    if "not permitted" in note:
        pytest.skip(f"this user may not set real-time priorities: {note}")
    assert note == "SCHED_FIFO 5"
    assert checks == "True True 5"


def test_run_node_refuses_a_malformed_priority_before_starting_ros() -> None:
    code = "from carryon_common.node import run_node; raise SystemExit(run_node(lambda: None))"
    env = {**os.environ, REALTIME_PRIORITY_ENV: "high"}
    command = [sys.executable, "-c", code]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert f"{REALTIME_PRIORITY_ENV}='high': not an integer" in done.stderr


def test_a_section_with_no_priority_leaves_scheduling_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object) -> None:
        raise AssertionError("must not be called")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    section = scheduling.RealtimeSection(0, "sending chunks")
    ran = []
    with section():
        ran.append(True)
    assert ran == [True] and section.note == "normal"


def test_a_section_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="out of range"):
        scheduling.RealtimeSection(100, "sending chunks")


@pytest.mark.skipif(not hasattr(os, "sched_setscheduler"), reason="no sched_setscheduler on this platform")
def test_a_section_without_the_privilege_runs_ordinary_and_says_so_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = []

    def refuse(*args: object) -> None:
        calls.append(args)
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_getscheduler", lambda _pid: os.SCHED_OTHER)
    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    section = scheduling.RealtimeSection(5, "sending chunks")
    assert section.probe().startswith("normal (SCHED_FIFO 5 for sending chunks not permitted")
    ran = []
    for _ in range(3):
        with section():
            ran.append(True)
    assert ran == [True, True, True]
    assert len(calls) == 1  # found out once, then ordinary without asking again
    assert capsys.readouterr().err.count("real-time priority not set") == 1


@pytest.mark.skipif(not hasattr(os, "sched_setscheduler"), reason="no sched_setscheduler on this platform")
def test_a_section_runs_fifo_and_puts_the_thread_back() -> None:
    """In a child process, like the test above: the thread is SCHED_FIFO inside the section
    only, an exception inside still puts it back, and a thread already more urgent stays so."""
    code = textwrap.dedent(
        """
        import os
        from carryon_common import scheduling
        section = scheduling.RealtimeSection(5, "sending chunks")
        print(section.probe())
        with section():
            inside = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)
        try:
            with section():
                raise KeyError("x")
        except KeyError:
            pass
        after = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)
        print(inside == (os.SCHED_FIFO, 5), after == (os.SCHED_OTHER, 0))
        scheduling.apply_realtime_priority(8)
        with section():
            kept = os.sched_getparam(0).sched_priority
        print(kept == 8, os.sched_getparam(0).sched_priority == 8)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    note, checks, nested = done.stdout.strip().splitlines()
    if "not permitted" in note:
        pytest.skip(f"this user may not set real-time priorities: {note}")
    assert note == "SCHED_FIFO 5 for sending chunks"
    assert checks == "True True"
    assert nested == "True True"
