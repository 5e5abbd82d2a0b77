"""Start each node as its own OS process, watch it, stop everything cleanly.

Pure process management (no rclpy): the readiness probe is injected by the caller.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from carryon_bringup.core.graph import NodeLaunch

TAIL_LINES = 20

# Called with (node name, one line of its output) for every line a node prints.
LinePrinter = Callable[[str, str], None]


@dataclass
class ManagedProcess:
    """A running (or finished) node process and the tail of its output."""

    launch: NodeLaunch
    command: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0
    tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    reader: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


@dataclass(frozen=True)
class Death:
    """A node process that exited while the graph was supposed to run."""

    name: str
    exit_code: int
    after_s: float
    tail: tuple[str, ...]
    restarting: bool

    def describe(self) -> str:
        how = f"exited with code {self.exit_code}"
        if self.exit_code < 0:
            try:
                how = f"was killed by {signal.Signals(-self.exit_code).name}"
            except ValueError:
                how = f"was killed by signal {-self.exit_code}"
        lines = "\n".join(f"    {line}" for line in self.tail) or "    (no output)"
        return f"{self.name} {how} after {self.after_s:.1f} s; last log lines:\n{lines}"


@dataclass(frozen=True)
class StopReport:
    stopped_cleanly: list[str]
    killed: list[str]
    duration_s: float


class Supervisor:
    """Owns the node processes of one graph run.

    Each node gets its own process group, so a stop reaches everything it spawned.
    Output is prefixed with the node name via `printer` and saved to
    `<log_dir>/<node>.log`.
    """

    def __init__(
        self,
        launches: Sequence[NodeLaunch],
        command_for: Callable[[NodeLaunch], list[str]],
        *,
        env: Mapping[str, str],
        log_dir: Path,
        cwd: Path,
        printer: LinePrinter,
    ) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self._env = dict(env)
        self._cwd = cwd
        self._printer = printer
        self.processes = {
            launch.name: ManagedProcess(launch, command_for(launch), log_dir / f"{launch.name}.log")
            for launch in launches
        }

    def start_all(self) -> None:
        for proc in self.processes.values():
            self._start(proc)

    def _start(self, proc: ManagedProcess) -> None:
        log = proc.log_path.open("ab")
        proc.popen = subprocess.Popen(
            proc.command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self._env,
            cwd=self._cwd,
            start_new_session=True,  # own process group: signals reach its children too
        )
        proc.started_at = time.monotonic()
        assert proc.popen.stdout is not None
        proc.reader = threading.Thread(
            target=self._pump, args=(proc, proc.popen.stdout, log), name=f"log-{proc.launch.name}", daemon=True
        )
        proc.reader.start()

    def _pump(self, proc: ManagedProcess, stream: IO[bytes], log: IO[bytes]) -> None:
        with log:
            for raw in iter(stream.readline, b""):
                log.write(raw)
                log.flush()
                line = raw.decode("utf-8", errors="replace").rstrip()
                proc.tail.append(line)
                self._printer(proc.launch.name, line)

    def poll(self) -> list[Death]:
        """Deaths since the last poll; processes with restarts left are restarted."""
        deaths = []
        for proc in self.processes.values():
            if proc.popen is None or proc.popen.poll() is None:
                continue
            code = proc.popen.returncode
            if proc.reader:
                proc.reader.join(timeout=1.0)  # collect the last lines before reporting
            restarting = proc.restarts < proc.launch.restart.max_restarts
            deaths.append(
                Death(proc.launch.name, code, time.monotonic() - proc.started_at, tuple(proc.tail), restarting)
            )
            if restarting:
                proc.restarts += 1
                time.sleep(proc.launch.restart.delay_s)
                self._start(proc)
            else:
                proc.popen = None
        return deaths

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.processes.items() if p.pid is not None and p.running()}

    def stop(self, timeout_s: float) -> StopReport:
        """SIGINT every process group, wait up to `timeout_s`, then SIGKILL what is left."""
        started = time.monotonic()
        alive = {name: p for name, p in self.processes.items() if p.running()}
        for proc in alive.values():
            _signal_group(proc, signal.SIGINT)
        deadline = started + timeout_s
        while time.monotonic() < deadline and any(p.running() for p in alive.values()):
            time.sleep(0.05)
        killed = []
        for name, proc in alive.items():
            if proc.running():
                _signal_group(proc, signal.SIGKILL)
                killed.append(name)
        for proc in alive.values():
            if proc.popen is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.popen.wait(timeout=2.0)
                # Children the node spawned share its process group; make sure none survive.
                _signal_group(proc, signal.SIGKILL)
            if proc.reader:
                proc.reader.join(timeout=1.0)
        clean = [name for name in alive if name not in killed]
        return StopReport(stopped_cleanly=clean, killed=killed, duration_s=time.monotonic() - started)


def _signal_group(proc: ManagedProcess, sig: signal.Signals) -> None:
    if proc.popen is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.popen.pid, sig)
