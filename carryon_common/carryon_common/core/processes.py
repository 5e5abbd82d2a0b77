"""Child processes the project starts and must not leave behind."""

from __future__ import annotations

import subprocess
from typing import Any


def stop_process(process: subprocess.Popen[Any], timeout_s: float = 10.0) -> None:
    """Ask `process` to end (SIGTERM); kill it if it has not within `timeout_s`. Reaps it
    either way; a process that already ended is only reaped."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
