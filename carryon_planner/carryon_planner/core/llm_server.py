"""The offline model as an OpenAI-compatible server on loopback: llama.cpp's server
(llama-cpp-python[server]), the model loaded once and shared by every client.

`llm_server_node` runs it inside the graph (`carryon up` starts that node when
planner_node's `llm_backend` is `local`); the planner, its summariser and recovery
reflection reach it through the same OpenAI client as vLLM, Ollama or a hosted API.
Decoding is constrained to the JSON Schema the client sends in `response_format`
(llama.cpp grammar), and the server keeps the last prompts' KV state in RAM so a repair
round or the next request re-uses the shared prompt prefix instead of re-reading it.

Without ROS, for benchmarks and tools:

    python -m carryon_planner.core.llm_server --model 0.5b --port 8421
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from carryon_common.core.config import NodeConfig, one_of
from carryon_common.core.errors import ConfigError
from carryon_common.core.llm_backends import LOCAL_SERVER_MODEL, LOCAL_SERVER_PORT
from carryon_common.core.local_models import LOCAL_MODELS, assemble

DEFAULT_PORT = LOCAL_SERVER_PORT
MODEL_ALIAS = LOCAL_SERVER_MODEL  # the model name clients send
SETUP_HINT = "run `bash scripts/setup_llm.sh` (llama-cpp-python[server], requirements/llm.txt)"


class LlmServerConfig(NodeConfig):
    model: Annotated[str, one_of("local model", tuple(LOCAL_MODELS))] = Field(
        "1.5b", description="The pinned model to serve when model_path is '' (1.5b or 0.5b; scripts/setup_llm.sh)."
    )
    model_path: str = Field("", description="A GGUF model file to serve instead of the pinned one.")
    host: str = Field("127.0.0.1", description="Listen address (loopback: the graph's nodes only).")
    port: int = Field(DEFAULT_PORT, ge=1, le=65535, description="Listen port.")
    threads: int = Field(2, ge=1, description="CPU threads for decoding.")
    context_tokens: int = Field(8192, ge=1024, description="Context window, tokens.")
    prompt_cache_mb: int = Field(
        512, ge=0, description="RAM for cached prompt states (prefix re-use between requests), MB; 0 = off."
    )


def base_url(host: str, port: int) -> str:
    """The OpenAI base URL of a server listening on host:port."""
    return f"http://{host}:{port}/v1"


def model_file(config: LlmServerConfig) -> Path:
    """The GGUF file to serve: model_path, else the pinned model (assembled if needed)."""
    if config.model_path:
        path = Path(config.model_path)
        if not path.is_file():
            raise ConfigError(f"model_path {path} is not a file")
        return path
    return assemble(LOCAL_MODELS[config.model])


class ModelServer:
    """llama.cpp's FastAPI app under uvicorn. `load()` reads the model (seconds to a
    minute); `serve()` blocks answering requests until `stop()`."""

    def __init__(self, config: LlmServerConfig) -> None:
        self.config = config
        self.url = base_url(config.host, config.port)
        self.model_path: Path | None = None
        self._server: Any = None

    def load(self) -> None:
        try:
            import uvicorn
            from llama_cpp.server.app import create_app
            from llama_cpp.server.settings import ModelSettings, ServerSettings
        except ImportError as exc:
            raise ConfigError(
                f"the model server needs llama-cpp-python[server] ({exc.name} missing): {SETUP_HINT}"
            ) from None
        self.model_path = model_file(self.config)
        cfg = self.config
        model = ModelSettings(
            model=str(self.model_path),
            model_alias=MODEL_ALIAS,
            n_ctx=cfg.context_tokens,
            n_threads=cfg.threads,
            n_threads_batch=cfg.threads,
            seed=0,
            # The server's default (True) computes the vocabulary's logits for every prompt token:
            # a 151k-row projection per token of a 3k-token planner prompt, for nothing.
            logits_all=False,
            cache=cfg.prompt_cache_mb > 0,
            cache_type="ram",
            cache_size=max(cfg.prompt_cache_mb, 1) << 20,
            verbose=False,
        )
        try:
            app = create_app(server_settings=ServerSettings(host=cfg.host, port=cfg.port), model_settings=[model])
        except (ValueError, RuntimeError) as exc:  # llama.cpp could not read the file
            raise ConfigError(f"cannot load {self.model_path}: {exc}") from None
        self._server = uvicorn.Server(uvicorn.Config(app, host=cfg.host, port=cfg.port, log_level="warning"))

    @property
    def started(self) -> bool:
        """True once the server listens."""
        return bool(self._server is not None and self._server.started)

    def serve(self) -> None:
        if self._server is None:
            raise RuntimeError("load() first")
        self._server.run()
        if not self._server.started:  # uvicorn logs why (most often: the port is taken) and returns
            raise ConfigError(f"the model server could not listen on {self.config.host}:{self.config.port}")

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--model", default="1.5b", choices=sorted(LOCAL_MODELS))
    parser.add_argument("--model-path", default="")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--context-tokens", type=int, default=8192)
    args = parser.parse_args(argv)
    config = LlmServerConfig(
        model=args.model,
        model_path=args.model_path,
        host=args.host,
        port=args.port,
        threads=args.threads,
        context_tokens=args.context_tokens,
    )
    server = ModelServer(config)
    try:
        server.load()
        print(f"[llm-server] {server.model_path} at {server.url}", flush=True)
        server.serve()  # uvicorn stops on Ctrl-C / SIGTERM in the main thread
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
