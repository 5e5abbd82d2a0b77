"""The local model server for benchmarks that plan without a graph.

With `llm_backend: local` the planner talks to llm_server_node, which `carryon up` starts.
A benchmark that plans in its own process (personalization, reflection) starts the same
server (`python -m carryon_planner.core.llm_server`) on a free loopback port for the run,
so its numbers come from the code path the graph uses; its output goes to the run folder.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from carryon_bench.core.bench import free_port
from carryon_common.core.errors import ConfigError
from carryon_common.core.processes import stop_process
from carryon_planner.core.config import PlannerConfig

LOAD_TIMEOUT_S = 300.0  # the 1.5B model loads in seconds; the first run assembles it from its parts


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=2.0) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def local_model_server(config: PlannerConfig, log_path: Path) -> Iterator[PlannerConfig]:
    """`config` unchanged unless its backend is `local` without a server address; then the
    server runs (the model `llm_local_model`, or `llm_model_path`) until the block ends,
    and the config given to the block points at it. ConfigError when it cannot start."""
    if config.llm_backend != "local" or config.llm_local_url:
        yield config
        return
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    command = [sys.executable, "-m", "carryon_planner.core.llm_server", "--port", str(port)]
    command += ["--model", config.llm_local_model, "--threads", str(config.llm_threads)]
    command += ["--context-tokens", str(config.llm_context_tokens)]
    if config.llm_model_path:
        command += ["--model-path", config.llm_model_path]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        server = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while not _answers(url):
            if server.poll() is not None:
                tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
                raise ConfigError(f"the local model server exited ({server.returncode}): {' / '.join(tail)}")
            if time.monotonic() > deadline:
                raise ConfigError(f"the local model server did not answer at {url} within {LOAD_TIMEOUT_S:.0f} s")
            time.sleep(0.5)
        yield config.model_copy(update={"llm_local_url": url})
    finally:
        stop_process(server)
