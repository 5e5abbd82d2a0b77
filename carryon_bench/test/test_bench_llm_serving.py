"""The model server a benchmark starts for `llm_backend: local` (bench/llm_serving.py);
the server itself is tested in carryon_planner/test/test_planner_llm_server.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from carryon_bench.llm_serving import local_model_server
from carryon_common.core.errors import ConfigError
from carryon_planner.core.config import PlannerConfig


def test_a_benchmark_gets_no_server_for_another_backend_and_a_clear_error_when_it_cannot_start(tmp_path: Path) -> None:
    scripted = PlannerConfig(llm_backend="scripted")
    with local_model_server(scripted, tmp_path / "llm_server.log") as config:
        assert config is scripted
    broken = PlannerConfig(llm_backend="local", llm_model_path=str(tmp_path / "none.gguf"))
    server = local_model_server(broken, tmp_path / "llm_server.log")
    with pytest.raises(ConfigError, match=r"the local model server exited \(2\)"), server:
        pass
    assert (tmp_path / "llm_server.log").read_text()
