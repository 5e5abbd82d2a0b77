"""Serve a LeRobot checkpoint over openpi's policy-server protocol, so `openpi_remote`
(policy_node on the robot PC, or a benchmark in CarryOn's own virtualenv) runs it where
torch lives: the LeRobot extra's virtualenv, or a GPU machine.

The protocol is the one core/openpi_client.py speaks (openpi's websocket_policy_server):
on connect the server sends its metadata (the checkpoint's image and state keys with
their shapes, the action size); each request is a msgpack map of the images ((H, W, 3)
uint8 at the checkpoint's sizes), the state vectors (under the checkpoint's keys) and the
prompt; the reply holds "actions" (H, D): the checkpoint's raw, de-normalised chunk (the
client maps it to commands with its vla_* settings) and "server_timing". A request it
cannot serve gets the error as a text frame, then the connection closes (as openpi's
server does); the next connection starts clean. One model serves every connection, one
inference at a time.

    python -m carryon_policy.lerobot_server --checkpoint DIR [--host 127.0.0.1] [--port 8000] [--device cpu]

Needs the LeRobot extra (requirements/lerobot.txt). Binds to loopback unless told otherwise;
off loopback, give it an API key (`--api-key-env VAR`: clients send it as openpi_remote does
with `remote_api_key_env`), and keep the link private: the protocol is not encrypted.
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import os
import sys
import threading
import time
import traceback
from http import HTTPStatus
from pathlib import Path
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.http11 import Request, Response
from websockets.sync.server import Server, ServerConnection, serve

from carryon_policy.core.lerobot_policy import LerobotEngine, checkpoint_folder, load_engine
from carryon_policy.core.openpi_client import packb, unpackb

PROMPT_KEY = "prompt"


class LerobotServer:
    """The server around one loaded `LerobotEngine`; `serve_forever()` or `start()` / `stop()`."""

    def __init__(
        self, engine: LerobotEngine, checkpoint: Path, host: str = "127.0.0.1", port: int = 0, api_key: str = ""
    ) -> None:
        self.engine = engine
        self._api_key = api_key
        self.metadata = {
            "server": "carryon lerobot_server",
            "policy_type": engine.policy_type,
            "checkpoint": str(checkpoint),
            "images": {key: [shape[1], shape[2], shape[0]] for key, shape in engine.image_shapes.items()},
            "states": {key: list(shape) for key, shape in engine.state_shapes.items()},
            "prompt_key": PROMPT_KEY,
        }
        self._server: Server = serve(self._handle, host, port, max_size=2**26, process_request=self._authorise)
        self._thread: threading.Thread | None = None
        self.served = 0

    @property
    def uri(self) -> str:
        host, port = self._server.socket.getsockname()[:2]
        return f"ws://{host}:{port}"

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def start(self) -> LerobotServer:
        self._thread = threading.Thread(target=self._server.serve_forever, name="lerobot-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _authorise(self, connection: ServerConnection, request: Request) -> Response | None:
        """With an API key, a connection without 'Authorization: Api-Key <key>' (what
        openpi_remote sends with remote_api_key_env) is refused before the handshake."""
        if not self._api_key:
            return None
        given = request.headers.get("Authorization", "")
        if hmac.compare_digest(given.encode(), f"Api-Key {self._api_key}".encode()):
            return None
        return connection.respond(HTTPStatus.UNAUTHORIZED, "missing or wrong API key\n")

    def _handle(self, connection: ServerConnection) -> None:
        try:
            connection.send(packb(self.metadata))
            while True:
                frame = connection.recv()
                if isinstance(frame, str):
                    connection.close(CloseCode.INVALID_DATA, "expected a binary msgpack frame")
                    return
                started = time.monotonic()
                try:
                    actions = self._infer(unpackb(frame))
                except Exception:  # noqa: BLE001 - any failure goes back to the client, as openpi's server does
                    connection.send(traceback.format_exc())
                    connection.close(CloseCode.INTERNAL_ERROR, "inference failed; traceback in the previous frame")
                    return
                self.served += 1
                reply = {"actions": actions, "server_timing": {"infer_ms": (time.monotonic() - started) * 1000.0}}
                connection.send(packb(reply))
        except ConnectionClosed:
            return

    def _infer(self, request: Any) -> Any:
        if not isinstance(request, dict):
            raise ValueError(f"the request is {type(request).__name__}, expected a map")
        task = request.get(PROMPT_KEY, "")
        return self.engine.raw_chunk(request, request, str(task))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True, help="folder saved with LeRobot's save_pretrained")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: loopback only)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 = a free one)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default 0: torch's choice)")
    parser.add_argument(
        "--api-key-env",
        default="",
        metavar="VAR",
        help="require 'Authorization: Api-Key $VAR' of every client (policy_node: remote_api_key_env)",
    )
    args = parser.parse_args(argv)
    api_key = os.environ.get(args.api_key_env, "") if args.api_key_env else ""
    if args.api_key_env and not api_key:
        parser.error(f"--api-key-env names {args.api_key_env!r}, which is unset or empty")
    folder = checkpoint_folder(args.checkpoint)
    engine = load_engine(folder, args.device)
    if args.threads > 0:
        engine.set_threads(args.threads)
    server = LerobotServer(engine, folder, args.host, args.port, api_key)
    print(f"serving {engine.policy_type} from {folder} on {server.uri}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
