"""Running the learned policy from CarryOn's own virtualenv, which has no torch: the
LeRobot extra's interpreter (`lerobot_python`), the environment its child processes need
(`extra_env`), and the checkpoint served over openpi's protocol by
carryon_policy.lerobot_server in such a child (`served_policy`: benchmarks then reach it
with `openpi_remote`, layout.remote_policy_config), on loopback.
"""

from __future__ import annotations

import importlib.util
import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from carryon_common.core.errors import CarryOnError
from carryon_common.core.processes import stop_process
from carryon_sim.harness.learned import layout

TRAIN_HINT = "train it with `make policy` (scripts/learned_policy.sh all: ~1 h on 2 cores)"
START_TIMEOUT_S = 120.0  # loading torch, LeRobot and the checkpoint on a busy 2-core machine


def lerobot_python() -> str:
    """An interpreter with torch and LeRobot: this one, else the extra's virtualenv
    ($LEROBOT_VENV or .venv-lerobot in the checkout). Raises CarryOnError."""
    if importlib.util.find_spec("torch") and importlib.util.find_spec("lerobot"):
        return sys.executable
    venv = Path(os.environ.get("LEROBOT_VENV") or layout.repo_root() / ".venv-lerobot") / "bin" / "python"
    if not venv.is_file():
        raise CarryOnError(f"the learned policy needs the LeRobot extra, and {venv} does not exist: {TRAIN_HINT}")
    return str(venv)


def extra_env() -> dict[str, str]:
    """This environment plus the checkout's packages on PYTHONPATH, headless rendering and
    no Hub access (the extra's virtualenv does not have CarryOn installed)."""
    root = layout.repo_root()
    # The packages' metadata (entry points: the policy backends) that scripts/test_extra.sh
    # makes beside the extra's virtualenv, as colcon's build does for the main one.
    try:
        metadata = Path(lerobot_python()).parent.parent / "carryon-metadata"
    except CarryOnError:  # no extra: the caller's own lerobot_python() says so
        metadata = root / ".venv-lerobot" / "carryon-metadata"
    paths = [metadata] if metadata.is_dir() else []
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(p) for p in [*paths, *sorted(root.glob("carryon_*"))] if p.is_dir()),
        "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"),
        "HF_HUB_OFFLINE": "1",
    }


def checked_checkpoint(checkpoint: Path) -> Path:
    """`checkpoint` when it holds a trained policy. Raises CarryOnError naming how to make one."""
    if not (checkpoint / "config.json").is_file():
        raise CarryOnError(f"no trained policy in {checkpoint}: {TRAIN_HINT}")
    return checkpoint


def trained_summary(checkpoint: Path) -> dict[str, Any]:
    """How `checkpoint` was trained (train.py's carryon_policy.json, without its loss log);
    {} for a checkpoint made elsewhere."""
    path = checkpoint / "carryon_policy.json"
    if not path.is_file():
        return {}
    return {k: v for k, v in json.loads(path.read_text(encoding="utf-8")).items() if k != "loss_log"}


@contextmanager
def served_policy(checkpoint: Path, log: Path, threads: int = 1) -> Iterator[str]:
    """carryon_policy.lerobot_server on `checkpoint` in a child process, on a free loopback
    port, while the block runs; yields its ws:// URI. Its output goes to `log`."""
    command = [
        lerobot_python(),
        "-m",
        "carryon_policy.lerobot_server",
        "--checkpoint",
        str(checked_checkpoint(checkpoint)),
    ]
    command += ["--port", "0", "--threads", str(threads)]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as errors:
        process = subprocess.Popen(command, env=extra_env(), stdout=subprocess.PIPE, stderr=errors, text=True)
        try:
            yield _wait_for_uri(process, log)
        finally:
            stop_process(process)


def _wait_for_uri(process: subprocess.Popen[str], log: Path) -> str:
    """The URI the server prints once it listens. Raises CarryOnError when it exits or
    stays silent for START_TIMEOUT_S."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and process.poll() is None:
            if selector.select(timeout=1.0):
                line = process.stdout.readline()
                if " on ws://" in line:
                    return line.rsplit(" on ", 1)[1].strip()
    if process.poll() is not None:
        raise CarryOnError(f"the learned policy's server exited (code {process.returncode}); see {log}")
    raise CarryOnError(f"the learned policy's server did not start in {START_TIMEOUT_S:.0f} s; see {log}")
