"""`carryon up`: start the graph from config/graph.yaml, one OS process per node.

For installs without `ros2 launch`. Validates every node's parameters before starting
anything, prefixes and saves each node's output, reports readiness, reports a node
that dies (exit code and last log lines) and stops the graph (or restarts the node if
its restart policy allows), and on Ctrl-C / SIGTERM stops every process and removes
the DDS shared-memory files they leave behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from carryon_bringup.core import shm
from carryon_bringup.core.graph import GraphSpec, NodeLaunch, find_config_dir
from carryon_bringup.core.run_keys import prepare_keys
from carryon_bringup.core.supervisor import Supervisor
from carryon_common.core.config import config_as_params, parse_override
from carryon_common.core.errors import CarryOnError, ConfigError
from carryon_common.core.names import PROFILE_ENV, REALTIME_PRIORITY_ENV, RUN_COMMAND_KEY, RUN_DIR_ENV

EXIT_OK = 0
EXIT_NODE_DIED = 1
EXIT_CONFIG = 2

_COLORS = (36, 32, 33, 35, 34, 91, 92, 93, 94, 95, 96)


def default_config_fallbacks() -> list[Path]:
    """Where config/ is looked for when neither --config-dir nor $CARRYON_CONFIG_DIR is set."""
    fallbacks = [Path.cwd() / "config"]
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory

        with contextlib.suppress(PackageNotFoundError):
            fallbacks.append(Path(get_package_share_directory("carryon_bringup")) / "config")
    except ImportError:
        pass
    return fallbacks


def load_spec(config_dir: str | None) -> GraphSpec:
    return GraphSpec.load(find_config_dir(config_dir, default_config_fallbacks()))


def executable_path(launch: NodeLaunch) -> Path:
    """Where `ros2 run <package> <executable>` would find the node's executable."""
    from ament_index_python.packages import PackageNotFoundError, get_package_prefix

    try:
        prefix = Path(get_package_prefix(launch.package))
    except PackageNotFoundError:
        raise ConfigError(
            f"{launch.name}: package {launch.package!r} is not installed (AMENT_PREFIX_PATH="
            f"{os.environ.get('AMENT_PREFIX_PATH', '(unset)')}); run `make setup` and `source env.sh`"
        ) from None
    exe = prefix / "lib" / launch.package / launch.executable
    if not os.access(exe, os.X_OK):
        raise ConfigError(f"{launch.name}: executable {exe} is missing or not executable; rebuild with `make setup`")
    return exe


def process_prefix(launch: NodeLaunch) -> list[str]:
    """What goes before a node's command (both launchers): `nice -n N` for graph.yaml's
    `nice`, and `env CARRYON_REALTIME_PRIORITY=N` for its `realtime_priority` (applied by
    the node itself: carryon_common.scheduling)."""
    nice = ["nice", "-n", str(launch.nice)] if launch.nice else []
    realtime = ["env", f"{REALTIME_PRIORITY_ENV}={launch.realtime_priority}"] if launch.realtime_priority else []
    return [*nice, *realtime]


def command_for(launch: NodeLaunch, log_level: str | None = None) -> list[str]:
    """The command line of one node: the same executable, name, namespace and parameter
    files (and prefix) that `ros2 launch` uses for the same NodeLaunch."""
    cmd = [
        *process_prefix(launch),
        str(executable_path(launch)),
        "--ros-args",
        "-r",
        f"__node:={launch.name}",
        "-r",
        f"__ns:=/{launch.namespace}",
    ]
    for path in launch.params_files:
        cmd += ["--params-file", str(path)]
    if log_level:
        cmd += ["--log-level", log_level]
    return cmd


def split_overrides(texts: Sequence[str], launches: Sequence[NodeLaunch]) -> dict[str, dict[str, Any]]:
    """`--set node.key=value` options grouped per node; unknown nodes are an error."""
    by_node: dict[str, dict[str, Any]] = {}
    valid = {launch.name for launch in launches}
    for text in texts:
        node, key, value = parse_override(text)
        if node not in valid:
            raise ConfigError(f"--set {text!r}: node {node!r} is not started (started: {', '.join(sorted(valid))})")
        by_node.setdefault(node, {})[key] = value
    return by_node


def command_key_params(
    spec: GraphSpec, profile: str, resolved: Mapping[str, Any], folder: Path, *, insecure: bool = False
) -> dict[str, Path]:
    """For the launch file: the keys as `carryon up` gives them (a new set in `folder` for a
    per-run profile, the installed set for the robot; run_keys.py) as a params file per node
    that needs them."""
    overrides: dict[str, dict[str, Any]] = {}
    keys = spec.profile(profile).keys
    prepare_keys(keys, resolved, overrides, folder, spec.config_classes(profile), insecure=insecure)
    paths = {}
    for name, params in overrides.items():
        paths[name] = folder / f"{name}_keys.yaml"
        paths[name].write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}))
    return paths


def validate(launches: Sequence[NodeLaunch], overrides: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Validate every node's parameters; raise one ConfigError listing all problems."""
    resolved: dict[str, Any] = {}
    problems: list[str] = []
    for launch in launches:
        try:
            resolved[launch.name] = launch.load_config(overrides.get(launch.name))
        except ConfigError as exc:
            problems.append(str(exc))
    if problems:
        raise ConfigError("\n".join(problems))
    return resolved


def plan_launches(
    spec: GraphSpec, profile: str, only: Sequence[str], sets: Sequence[str]
) -> tuple[list[NodeLaunch], dict[str, dict[str, Any]], dict[str, Any]]:
    """The nodes to start with their `--set` overrides and validated configs: the profile's
    (or `only`), less those started for another node's setting that it does not have
    (llm_server_node when the planner's llm_backend is not local)."""
    launches = spec.launches(profile, only or None)
    overrides = split_overrides(sets, launches)
    resolved = validate(launches, overrides)
    launches = spec.needed(launches, resolved, named=only)
    return launches, overrides, {launch.name: resolved[launch.name] for launch in launches}


class _Console:
    """Prefixed console output. A closed or broken stdout (e.g. `carryon up | head`)
    turns the console off; it never stops the graph (the log files have everything)."""

    def __init__(self, names: Sequence[str]) -> None:
        self._lock = threading.Lock()
        self._broken = False
        width = max((len(n) for n in names), default=8)
        color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        self._prefix = {
            n: (f"\x1b[{_COLORS[i % len(_COLORS)]}m[{n:<{width}}]\x1b[0m" if color else f"[{n:<{width}}]")
            for i, n in enumerate(names)
        }

    def _print(self, text: str) -> None:
        with self._lock:
            if self._broken:
                return
            try:
                print(text, flush=True)
            except (OSError, ValueError):
                self._broken = True

    def line(self, name: str, text: str) -> None:
        self._print(f"{self._prefix.get(name, '[' + name + ']')} {text}")

    def say(self, text: str) -> None:
        self._print(f"[carryon up] {text}")


class _Events:
    """`events.jsonl` in the run folder: one JSON object per graph event, for tools and tests."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def __call__(self, event: str, **fields: Any) -> None:
        record = {"time": time.time(), "event": event, **fields}
        with self._path.open("a") as stream:
            stream.write(json.dumps(record) + "\n")


def run_up(
    *,
    profile: str | None,
    only: Sequence[str],
    config_dir: str | None,
    sets: Sequence[str],
    run_dir: str | None,
    log_level: str | None,
    ready_timeout_s: float,
    stop_timeout_s: float,
    insecure: bool = False,
) -> int:
    try:
        spec = load_spec(config_dir)
        profile = spec.resolve_profile(profile)
        launches, overrides, resolved = plan_launches(spec, profile, only, sets)
        folder = Path(run_dir) if run_dir else Path("runs") / f"{dt.datetime.now():%Y%m%d-%H%M%S}-up-{profile}"
        folder.mkdir(parents=True, exist_ok=True)
        # E-stop latches survive a node's restart within this run, not a new run in the same folder.
        shutil.rmtree(folder / "state", ignore_errors=True)
        keys_dir = (folder / RUN_COMMAND_KEY).parent
        prepare_keys(
            spec.profile(profile).keys, resolved, overrides, keys_dir, spec.config_classes(profile), insecure=insecure
        )
        resolved = validate(launches, overrides)
        launches = _with_override_files(launches, overrides, folder)
        commands = {launch.name: command_for(launch, log_level) for launch in launches}
    except CarryOnError as exc:  # config errors, unknown profile or node names
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG

    (folder / "resolved_config.yaml").write_text(
        yaml.safe_dump({name: config_as_params(cfg)["/**"] for name, cfg in resolved.items()}, sort_keys=False)
    )
    names = [launch.name for launch in launches]
    console = _Console(names)
    events = _Events(folder / "events.jsonl")
    env = dict(os.environ)
    env[RUN_DIR_ENV] = str(folder.resolve())  # where nodes keep their records of this run
    env[PROFILE_ENV] = profile  # each node reports it: `carryon status` finds the running profile
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    env.update(
        PYTHONUNBUFFERED="1",
        RCUTILS_COLORIZED_OUTPUT="0",
        RCUTILS_CONSOLE_OUTPUT_FORMAT="[{severity}] [{time}] {message}",
        ROS_LOG_DIR=str((folder / "ros_logs").resolve()),
        CARRYON_CONFIG_DIR=str(spec.config_dir),  # nodes find scenes, skills, ... in the same config
    )
    supervisor = Supervisor(
        launches,
        lambda launch: commands[launch.name],
        env=env,
        log_dir=folder / "logs",
        cwd=Path.cwd(),
        printer=console.line,
    )

    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if not stop.is_set():
            events("signal", signal=signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    # Segments left by earlier runs that were killed (no live process uses them) can stall
    # Fast DDS's shared-memory transport in new participants: remove them first.
    leftovers = shm.remove_stale(shm.dds_shm_files())
    if leftovers:
        console.say(f"removed {len(leftovers)} stale DDS shared-memory file(s) left by earlier runs")
    shm_before = shm.dds_shm_files()
    started = time.monotonic()
    domain = env.get("ROS_DOMAIN_ID", "0")
    console.say(f"profile {profile!r}: starting {len(launches)} node(s) in /{spec.namespace} (ROS_DOMAIN_ID={domain})")
    console.say(f"logs and records in {folder}")
    events("starting", profile=profile, nodes=names, namespace=spec.namespace, domain_id=domain)
    code = EXIT_OK
    probe = None
    try:
        supervisor.start_all()
        pids = supervisor.pids()
        _write_processes(folder, supervisor, commands)
        from carryon_bringup.node import ReadinessProbe  # rclpy only after config checks passed

        probe = ReadinessProbe(spec.namespace, names)
        waiting_since = time.monotonic()
        while not stop.is_set():
            for death in supervisor.poll():
                console.say(("NODE DIED: " if not death.restarting else "node restarting: ") + death.describe())
                events(
                    "restarting" if death.restarting else "died",
                    node=death.name,
                    exit_code=death.exit_code,
                    after_s=round(death.after_s, 3),
                    tail=list(death.tail),
                )
                if death.restarting:
                    probe = probe or ReadinessProbe(spec.namespace, names)
                    probe.forget(death.name)
                    waiting_since = time.monotonic()
                else:
                    code = EXIT_NODE_DIED
                    stop.set()
            if stop.is_set():
                break
            if supervisor.pids() != pids:  # a node was restarted
                pids = supervisor.pids()
                _write_processes(folder, supervisor, commands)
            if probe is None:
                stop.wait(0.1)
                continue
            probe.step(timeout_s=0.1)
            supervisor.settle(probe.ready())  # niced nodes yield once ready, not while starting
            if len(probe.ready()) == len(launches):
                elapsed = time.monotonic() - started
                console.say(f"all {len(launches)} node(s) ready after {elapsed:.1f} s")
                events("ready", nodes=names, after_s=round(elapsed, 3), pids=supervisor.pids())
                probe.close()
                probe = None
            elif time.monotonic() - waiting_since > ready_timeout_s:
                not_ready = sorted(set(names) - probe.ready())
                console.say(f"WARNING: not ready after {ready_timeout_s:.0f} s: {', '.join(not_ready)} (still waiting)")
                events("not_ready", nodes=not_ready, after_s=round(time.monotonic() - started, 3))
                waiting_since = time.monotonic()
    finally:
        # Stop the nodes before anything else can fail (closing the probe, printing).
        report = supervisor.stop(stop_timeout_s)
        if probe is not None:
            probe.close()
        removed = shm.remove_stale(shm.dds_shm_files() - shm_before, ignore_pids=[os.getpid()])
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        events(
            "stopped",
            clean=report.stopped_cleanly,
            killed=report.killed,
            duration_s=round(report.duration_s, 3),
            removed_shm_files=len(removed),
            dropped_console_lines=supervisor.dropped_console_lines,
        )
        killed = f"; killed after {stop_timeout_s:.0f} s: {', '.join(report.killed)}" if report.killed else ""
        console.say(
            f"stopped {len(report.stopped_cleanly) + len(report.killed)} node(s) in {report.duration_s:.1f} s{killed}; "
            f"removed {len(removed)} stale DDS shared-memory file(s)"
        )
    return code


def _with_override_files(
    launches: Sequence[NodeLaunch], overrides: Mapping[str, Mapping[str, Any]], folder: Path
) -> list[NodeLaunch]:
    """Write `--set` values as one more params file per node (exact types, applied last)."""
    out = []
    for launch in launches:
        values = overrides.get(launch.name)
        if not values:
            out.append(launch)
            continue
        path = (folder / "overrides" / f"{launch.name}.yaml").resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump({"/**": {"ros__parameters": dict(values)}}))
        out.append(dataclasses.replace(launch, params_files=(*launch.params_files, path)))
    return out


def _write_processes(folder: Path, supervisor: Supervisor, commands: Mapping[str, list[str]]) -> None:
    """processes.json: current pid and command of every node (replaced atomically)."""
    record = {
        "launcher_pid": os.getpid(),
        "nodes": {name: {"pid": pid, "command": commands[name]} for name, pid in supervisor.pids().items()},
    }
    tmp = folder / "processes.json.tmp"
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(folder / "processes.json")
