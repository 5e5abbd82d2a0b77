"""llm_server_node: the offline model as an OpenAI-compatible server on loopback (see
core/llm_server.py), inside the graph so that `carryon status` shows it and `carryon up`
supervises it like any node.

It answers its status at once and loads the model in the background: up and DEGRADED
("loading the model") while the model loads, so that the graph's readiness does not wait
on a read of a GB from a cold disk (a graph test saw it take over 25 s while nine other
nodes started), READY once the server listens, DEGRADED with the fix when it cannot serve
(llama-cpp-python[server] not installed, the model file missing, the port taken). The node
stays up in every case, and so does the graph; the planner's requests then fail with the
address they could not reach, and its warm-up waits for the server to answer.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from carryon_common.core import names
from carryon_common.core.errors import CarryOnError
from carryon_common.core.status import implemented
from carryon_common.node import CarryOnNode, run_node
from carryon_planner.core.llm_server import LlmServerConfig, ModelServer

CAPABILITIES = (
    implemented(
        "llm_server.openai",
        "OpenAI-compatible chat completions on loopback (llama.cpp's server), JSON-Schema-constrained, "
        "prompt prefixes cached; shared by the planner, its summariser and recovery reflection",
    ),
)


class LlmServerNode(CarryOnNode):
    def __init__(self, **node_kwargs: Any) -> None:
        super().__init__(names.LLM_SERVER_NODE, LlmServerConfig, capabilities=CAPABILITIES, **node_kwargs)
        self.server = ModelServer(self.config)
        model = self.config.model_path or self.config.model
        self.set_backends({"llm": f"llama.cpp model {model} at {self.server.url}"})
        self.problem = f"loading the model; will serve {self.server.url}"  # why it cannot serve now
        self.add_readiness_check(lambda: self.problem or None)
        self.set_ready()  # up, DEGRADED while loading (the readiness check)
        self._thread = threading.Thread(target=self._serve, name="llm_server", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            self.server.load()
            threading.Thread(target=self._ready_when_listening, daemon=True).start()
            self.server.serve()
            problem = "the model server stopped"
        except CarryOnError as exc:
            problem = f"cannot serve: {exc}"
        except Exception as exc:  # noqa: BLE001 - the node stays up and says why it cannot serve
            problem = f"the model server failed: {type(exc).__name__}: {exc}"
        if self.context.ok():
            self.problem = problem
            self.get_logger().error(problem)
            self.set_ready()  # up, and DEGRADED with the reason (the readiness check), so the graph goes on

    def _ready_when_listening(self) -> None:
        while self._thread.is_alive() and not self.server.started:
            self._thread.join(0.05)
        if self.server.started:
            self.problem = ""
            self.set_ready()

    def destroy_node(self) -> None:
        self.server.stop()
        self._thread.join(timeout=1.0)  # within the launchers' stop timeout (4 s); a decode does not stop (main)
        super().destroy_node()


def main() -> int:
    code = run_node(LlmServerNode)
    # A decode in llama.cpp cannot be interrupted, and interpreter exit would wait for the
    # server's worker thread to finish it (tens of seconds: `carryon up` kills the node after
    # its stop timeout). The node has shut down (run_node): leave without waiting.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
