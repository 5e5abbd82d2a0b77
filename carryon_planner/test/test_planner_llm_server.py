"""llm_server_node and the model server it runs (core/llm_server.py).

Without llama-cpp-python[server] or a model (CI) the node stays up, DEGRADED, saying how
to fix it. Where scripts/setup_llm.sh ran (0.5b is enough) the real server is started and
asked for a schema-constrained plan through the planner's `local` backend."""

from __future__ import annotations

import importlib.util
import json
import socket
from pathlib import Path

import pytest
from rclpy.parameter import Parameter

from carryon_common.core.errors import ConfigError
from carryon_common.core.llm import ChatMessage
from carryon_common.core.llm_backends import LlmSettings, make_llm
from carryon_common.core.local_models import LOCAL_MODELS, models_dir
from carryon_common.core.status import NodeState
from carryon_planner.core.llm_server import LlmServerConfig, ModelServer
from carryon_planner.llm_server_node import LlmServerNode

HAS_SERVER = importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("uvicorn") is not None
SMALL_MODEL = models_dir() / LOCAL_MODELS["0.5b"].file_name


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


needs_model = pytest.mark.skipif(
    not (HAS_SERVER and SMALL_MODEL.is_file()),
    reason="llama-cpp-python[server] and the 0.5b model not installed; run scripts/setup_llm.sh --model 0.5b",
)


def test_a_node_that_cannot_serve_stays_up_degraded_with_the_fix(ros, wait_until, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    missing = str(tmp_path / "none.gguf")
    overrides = [Parameter("model_path", value=missing), Parameter("port", value=free_port())]
    node = ros.add(LlmServerNode(namespace="carryon", context=ros.context, parameter_overrides=overrides))
    assert wait_until(lambda: "cannot serve" in node.health().message, 10.0), node.health()
    health = node.health()
    assert health.state == NodeState.DEGRADED and health.ready  # the graph goes on: `carryon up` counts it as started
    assert "cannot serve" in health.message
    assert ("setup_llm.sh" in health.message) if not HAS_SERVER else (f"{missing} is not a file" in health.message)
    assert any("127.0.0.1" in backend for backend in health.backends)


def test_the_server_refuses_a_bad_model_file_before_listening(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model")
    server = ModelServer(LlmServerConfig(model_path=str(bad), port=free_port()))
    with pytest.raises(ConfigError):  # llama-cpp-python missing, or it cannot read the file
        server.load()
    assert not server.started


@needs_model
def test_the_served_model_answers_a_schema_constrained_request(ros, wait_until) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    overrides = [
        Parameter("model", value="0.5b"),
        Parameter("port", value=port),
        Parameter("prompt_cache_mb", value=64),
    ]
    node = ros.add(LlmServerNode(namespace="carryon", context=ros.context, parameter_overrides=overrides))
    assert node.health().state == NodeState.DEGRADED and "loading the model" in node.health().message
    assert wait_until(lambda: "loading the model" not in node.health().message, 120.0)
    assert node.health().state == NodeState.READY, node.health()
    llm = make_llm(LlmSettings(llm_backend="local", llm_local_url=f"http://127.0.0.1:{port}/v1", llm_timeout_s=120.0))
    schema = {
        "title": "Pick",
        "type": "object",
        "properties": {"object": {"enum": ["carrot", "ham", "bread"]}, "reason": {"type": "string", "maxLength": 40}},
        "required": ["object", "reason"],
        "additionalProperties": False,
    }
    reply = json.loads(llm.complete([ChatMessage("user", "A vegetarian wants a vegetable. Pick one.")], schema))
    assert reply["object"] in {"carrot", "ham", "bread"} and isinstance(reply["reason"], str)
