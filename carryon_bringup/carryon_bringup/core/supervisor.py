"""Start each node as its own OS process, watch it, stop everything cleanly.

Pure process management (no rclpy): the readiness probe is injected by the caller.

Each node runs in its own process group so a stop reaches whatever it spawned. A
group is always signalled while its leader is dead-but-not-reaped (a zombie), so its
id cannot have been reused by an unrelated process. Node output goes to its log file
first; the console gets it through a bounded queue, so a slow or closed terminal never
blocks a node.
"""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from carryon_bringup.core.graph import NodeLaunch
from carryon_common.core.names import LAUNCHER_PID_ENV


def set_autogroup_nice(pid: int, nice: int) -> bool:
    """Give the scheduling autogroup of `pid`'s session the niceness `nice`.

    Each node runs in its own session (its own process group, so that signals reach its
    children), and where the kernel groups sessions for scheduling (autogroup, on by default
    in Debian's kernels: /proc/sys/kernel/sched_autogroup_enabled) CPU time is shared between
    sessions first: a process's own `nice -n` then only weighs against the processes of its
    session, and a niced node took as much CPU as any other (each busy node got an equal
    share: the offline model ~20 % of a core in the running graph). The session's niceness is
    what weighs; raising it needs no privilege. False where the kernel has no autogroup file or
    it cannot be written (with autogroup off or absent, the `nice -n` prefix does the work)."""
    try:
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))
    except OSError:
        return False
    return True


TAIL_LINES = 20
CONSOLE_QUEUE_LINES = 10_000

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
    restart_at: float | None = None  # monotonic time of a scheduled restart
    tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    reader: threading.Thread | None = None
    niced_pid: int | None = None  # the process whose session was given launch.nice

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def exited(self) -> bool:
        """True once the process has exited; it stays unreaped (see `reap`)."""
        if self.popen is None or self.popen.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, self.popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def kill_group(self, sig: signal.Signals) -> None:
        """Signal the node's process group (leader alive or a zombie, never reaped)."""
        if self.popen is not None and self.popen.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, sig)

    def reap(self) -> int:
        """Kill whatever is left of the group, collect the exit code and the last output."""
        assert self.popen is not None
        self.kill_group(signal.SIGKILL)
        code = self.popen.wait()
        if self.reader:
            self.reader.join(timeout=1.0)
        return code


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

    Output is saved to `<log_dir>/<node>.log` and handed to `printer` (prefixing it
    with the node name) from a console thread.
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
        self._env = {**env, LAUNCHER_PID_ENV: str(os.getpid())}
        self._cwd = cwd
        self._printer = printer
        self._console: queue.Queue[tuple[str, str] | None] = queue.Queue(maxsize=CONSOLE_QUEUE_LINES)
        self.dropped_console_lines = 0
        self._console_thread = threading.Thread(target=self._print_console, name="console", daemon=True)
        self._console_thread.start()
        self.processes = {
            launch.name: ManagedProcess(launch, command_for(launch), log_dir / f"{launch.name}.log")
            for launch in launches
        }

    def start_all(self) -> None:
        for proc in self.processes.values():
            self._start(proc)

    def _start(self, proc: ManagedProcess, restart: bool = False) -> None:
        log = proc.log_path.open("ab")
        env = self._env
        if restart and "FASTDDS_BUILTIN_TRANSPORTS" not in env:
            # A process killed with SIGKILL leaves its Fast DDS shared-memory port locked while its
            # peers still map it; the restarted node could then fail to open its port
            # ("open_and_lock_file failed") and never be discovered. It talks UDP on loopback instead.
            env = {**env, "FASTDDS_BUILTIN_TRANSPORTS": "UDPv4"}
        proc.popen = subprocess.Popen(
            proc.command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self._cwd,
            start_new_session=True,  # own process group: signals reach its children too
        )
        proc.started_at = time.monotonic()
        proc.restart_at = None
        assert proc.popen.stdout is not None
        proc.reader = threading.Thread(
            target=self._pump, args=(proc, proc.popen.stdout, log), name=f"log-{proc.launch.name}", daemon=True
        )
        proc.reader.start()

    def settle(self, ready: Iterable[str]) -> list[str]:
        """Give each ready node that asks for a niceness (launch.nice) its session's
        niceness (set_autogroup_nice), once per process; the names newly niced.

        Only once ready: a node niced from its start waits behind the busy ones for its
        imports and setup too (the judge took 23 s instead of 3 s to answer ready while the
        offline model warmed up, and the graph missed its 30 s readiness); the niceness is for
        its steady state, where it should yield to the control path."""
        niced = []
        for name in ready:
            proc = self.processes.get(name)
            if proc is None or not proc.launch.nice or proc.popen is None or proc.niced_pid == proc.popen.pid:
                continue
            proc.niced_pid = proc.popen.pid
            if set_autogroup_nice(proc.popen.pid, proc.launch.nice):
                niced.append(name)
        return niced

    def _pump(self, proc: ManagedProcess, stream: IO[bytes], log: IO[bytes]) -> None:
        with log:
            for raw in iter(stream.readline, b""):
                log.write(raw)
                log.flush()
                line = raw.decode("utf-8", errors="replace").rstrip()
                proc.tail.append(line)
                try:
                    self._console.put_nowait((proc.launch.name, line))
                except queue.Full:
                    self.dropped_console_lines += 1  # the log file has it; the console is too slow

    def _print_console(self) -> None:
        while (item := self._console.get()) is not None:
            with contextlib.suppress(Exception):  # a closed or broken console must not stop the graph
                self._printer(*item)

    def poll(self) -> list[Death]:
        """Deaths since the last poll; nodes with restarts left are restarted after their delay."""
        now = time.monotonic()
        deaths = []
        for proc in self.processes.values():
            if proc.restart_at is not None and now >= proc.restart_at:
                self._start(proc, restart=True)
                continue
            if proc.popen is None or proc.restart_at is not None or not proc.exited():
                continue
            code = proc.reap()  # also kills any children it left behind
            restarting = proc.restarts < proc.launch.restart.max_restarts
            deaths.append(Death(proc.launch.name, code, now - proc.started_at, tuple(proc.tail), restarting))
            if restarting:
                proc.restarts += 1
                proc.restart_at = now + proc.launch.restart.delay_s
            else:
                proc.popen = None
        return deaths

    def pids(self) -> dict[str, int]:
        return {name: p.popen.pid for name, p in self.processes.items() if p.popen is not None and p.restart_at is None}

    def stop(self, timeout_s: float) -> StopReport:
        """SIGINT every process group, wait up to `timeout_s`, then SIGKILL what is left."""
        started = time.monotonic()
        alive = {name: p for name, p in self.processes.items() if p.popen is not None and p.restart_at is None}
        for proc in self.processes.values():
            proc.restart_at = None
        for proc in alive.values():
            proc.kill_group(signal.SIGINT)
        deadline = started + timeout_s
        while time.monotonic() < deadline and not all(p.exited() for p in alive.values()):
            time.sleep(0.05)
        killed = [name for name, proc in alive.items() if not proc.exited()]
        for proc in alive.values():
            proc.reap()
        with contextlib.suppress(queue.Full):  # a stalled console must not hold up the stop
            self._console.put(None, timeout=1.0)
        self._console_thread.join(timeout=1.0)
        clean = [name for name in alive if name not in killed]
        return StopReport(stopped_cleanly=clean, killed=killed, duration_s=time.monotonic() - started)
