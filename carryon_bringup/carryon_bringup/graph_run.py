"""Run `carryon up` as a child process and drive it: for tests and benchmarks.

The child gets its own ROS_DOMAIN_ID and loopback-only discovery, so parallel runs
never see each other.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from carryon_bringup.core import shm
from carryon_bringup.core.graph import GraphSpec

_READY = re.compile(r"all (\d+) node\(s\) ready after ([\d.]+) s")


def fresh_domain_id() -> int:
    """A ROS_DOMAIN_ID for one run (100..199; away from the default 0 of a robot PC)."""
    return random.SystemRandom().randrange(100, 200)


class GraphRun:
    """`carryon up` in a child process, with its own domain and run folder."""

    def __init__(
        self,
        spec: GraphSpec,
        run_dir: Path,
        *,
        profile: str = "sim",
        only: Sequence[str] = (),
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        domain_id: int | None = None,
    ) -> None:
        self.spec = spec
        self.run_dir = run_dir.resolve()
        self.profile = profile
        self.node_names = [launch.name for launch in spec.launches(profile, only or None)]
        self.domain_id = domain_id if domain_id is not None else fresh_domain_id()
        self.env = dict(os.environ if env is None else env)
        self.env.update(ROS_DOMAIN_ID=str(self.domain_id), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
        self.command = [
            sys.executable, "-m", "carryon_bringup.cli", "up",
            "--profile", profile, "--config-dir", str(spec.config_dir), "--run-dir", str(self.run_dir),
            *(arg for name in only for arg in ("--only", name)),
            *extra_args,
        ]  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None
        self.output_path = run_dir / "launcher.out"
        self._output: IO[bytes] | None = None
        self.shm_before: set[Path] = set()

    def start(self) -> GraphRun:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.shm_before = shm.dds_shm_files()
        self._output = self.output_path.open("wb")
        self.process = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=self._output,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.run_dir,  # relative paths in the config (memory/, skills/) land in the run folder
        )
        return self

    def output(self) -> str:
        return self.output_path.read_text(errors="replace") if self.output_path.exists() else ""

    def wait_ready(self, timeout_s: float) -> float:
        """Seconds from launch until every node answered ready, as measured by the launcher's
        own readiness probe. RuntimeError when the launcher exits or time runs out.

        Readiness is read from the launcher's output rather than probed from this process,
        so a test process never becomes a DDS participant itself.
        """
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = _READY.search(self.output())
            if found:
                return float(found.group(2))
            if self.process.poll() is not None:
                raise RuntimeError(f"carryon up exited with {self.process.returncode}:\n{self.output()}")
            time.sleep(0.1)
        raise RuntimeError(f"not ready after {timeout_s:.0f} s:\n{self.output()}")

    def node_pids(self) -> dict[str, int]:
        path = self.run_dir / "processes.json"
        if not path.exists():
            return {}
        return {name: int(info["pid"]) for name, info in json.loads(path.read_text())["nodes"].items()}

    def stop(self, sig: signal.Signals = signal.SIGINT, timeout_s: float = 15.0) -> float:
        """Send `sig` to the launcher; seconds until it exited (it is killed after `timeout_s`)."""
        assert self.process is not None
        started = time.monotonic()
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise RuntimeError(f"carryon up did not exit within {timeout_s:.0f} s of {sig.name}") from None
        if self._output:
            self._output.close()
        return time.monotonic() - started

    def new_shm_files(self) -> set[Path]:
        """DDS shared-memory files created since start that are still there."""
        return shm.dds_shm_files() - self.shm_before

    def __enter__(self) -> GraphRun:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(RuntimeError):
                self.stop(signal.SIGTERM)
