"""Run `carryon up` as a child process and drive it: for tests and benchmarks.

The child gets its own ROS_DOMAIN_ID and loopback-only discovery, so parallel runs
never see each other.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from carryon_bringup.core import shm
from carryon_bringup.core.domain import reserve_domain_id
from carryon_bringup.core.graph import GraphSpec
from carryon_bringup.core.run_keys import KEYS_DIR_ENV, make_keys, signers
from carryon_bringup.up import plan_launches
from carryon_common.core.errors import CarryOnError
from carryon_common.core.names import RUN_COMMAND_KEY


def _callers_domain() -> list[int]:
    """The domain of the calling shell (a graph someone runs there): never reused."""
    value = os.environ.get("ROS_DOMAIN_ID", "")
    return [int(value)] if value.isdigit() else []


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
        # The nodes `carryon up` will start (llm_server_node only for a local planner model).
        sets = [value for flag, value in itertools.pairwise(extra_args) if flag == "--set"]
        try:
            self.node_names = [launch.name for launch in plan_launches(spec, profile, only, sets)[0]]
        except CarryOnError:  # `carryon up` will say what is wrong; a test may want to see that
            self.node_names = [launch.name for launch in spec.launches(profile, only or None) if not launch.when]
        self._reservation = None if domain_id is not None else reserve_domain_id(_callers_domain())
        self.domain_id = domain_id if domain_id is not None else self._reservation.domain_id
        self.env = dict(os.environ if env is None else env)
        self.env.update(ROS_DOMAIN_ID=str(self.domain_id), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
        if spec.profile(profile).keys == "installed" and KEYS_DIR_ENV not in self.env:
            # A robot PC's keys (`carryon keys init`), made for this run: tests and benches of the
            # robot profile start it with its keys, never with the developer's own.
            folder = self.run_dir / "installed_keys"
            make_keys(folder, signers(spec.config_classes(profile)))
            self.env[KEYS_DIR_ENV] = str(folder)
        self.command = [
            sys.executable,
            "-m",
            "carryon_bringup.cli",
            "up",
            "--profile",
            profile,
            "--config-dir",
            str(spec.config_dir),
            "--run-dir",
            str(self.run_dir),
            *(arg for name in only for arg in ("--only", name)),
            *extra_args,
        ]
        self.process: subprocess.Popen[bytes] | None = None
        self.output_path = run_dir / "launcher.out"
        self._output: IO[bytes] | None = None
        self.shm_before: set[Path] = set()

    @property
    def keys_dir(self) -> Path:
        """The folder this graph's keys come from (core/run_keys.py): the run folder's, or the
        installed set of a robot profile."""
        if self.spec.profile(self.profile).keys == "installed":
            return Path(self.env[KEYS_DIR_ENV])
        return (self.run_dir / RUN_COMMAND_KEY).parent

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

    def events(self) -> list[dict[str, Any]]:
        """The launcher's events so far (events.jsonl in the run folder)."""
        path = self.run_dir / "events.jsonl"
        if not path.exists():
            return []
        lines = path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.endswith("}")]  # skip a line being written

    def event(self, kind: str) -> dict[str, Any] | None:
        """The first event of `kind`, if it happened."""
        return next((e for e in self.events() if e["event"] == kind), None)

    def wait_for_event(self, kind: str, timeout_s: float) -> dict[str, Any]:
        """Wait until the launcher records `kind`; RuntimeError if it exits first or time runs out.

        Readiness is taken from the launcher's own probe, so a test process never joins
        the DDS domain itself.
        """
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.event(kind)
            if found is not None:
                return found
            if self.process.poll() is not None:
                raise RuntimeError(f"carryon up exited with {self.process.returncode}:\n{self.output()}")
            time.sleep(0.1)
        raise RuntimeError(f"no {kind!r} event after {timeout_s:.0f} s:\n{self.output()}")

    def wait_ready(self, timeout_s: float) -> float:
        """Seconds from launch until every node answered ready (measured by the launcher)."""
        return float(self.wait_for_event("ready", timeout_s)["after_s"])

    def node_pids(self) -> dict[str, int]:
        path = self.run_dir / "processes.json"
        if not path.exists():
            return {}
        return {name: int(info["pid"]) for name, info in json.loads(path.read_text())["nodes"].items()}

    def stop(self, sig: signal.Signals = signal.SIGINT, timeout_s: float = 15.0) -> float:
        """Send `sig` to the launcher; seconds until it exited. If it does not exit within
        `timeout_s`, it and every node it started are killed and RuntimeError is raised."""
        assert self.process is not None
        started = time.monotonic()
        try:
            if self.process.poll() is None:
                self.process.send_signal(sig)
                try:
                    self.process.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    self._kill_everything()
                    raise RuntimeError(f"carryon up did not exit within {timeout_s:.0f} s of {sig.name}") from None
            return time.monotonic() - started
        finally:
            if self._output:
                self._output.close()
            if self._reservation is not None:
                self._reservation.release()

    def _kill_everything(self) -> None:
        assert self.process is not None
        pids = self.node_pids()
        self.process.kill()
        self.process.wait()
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)

    def new_shm_files(self) -> set[Path]:
        """DDS shared-memory files created since start that are still there."""
        return shm.dds_shm_files() - self.shm_before

    def __enter__(self) -> GraphRun:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(RuntimeError):  # _kill_everything has run; the test reports its own failure
                self.stop(signal.SIGTERM)
        else:
            if self._output:
                self._output.close()
            if self._reservation is not None:
                self._reservation.release()
