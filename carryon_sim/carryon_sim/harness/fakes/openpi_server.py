"""A fake openpi policy server: the real websocket protocol (metadata on connect, msgpack
with numpy arrays, server_timing in replies, errors as a text frame) around a trivial
deterministic policy, for tests and for measuring openpi_remote over loopback.

The policy moves the tool +2 mm along x per step with the gripper open (raw value 0) and
nothing else; it reads nothing but checks that the request is a map. Test knobs
(`FakeBehaviour`, mutable while serving): a delay per inference, and faults — NaN actions,
wrong shape, a reply without actions, closing the connection, an error text frame, no or bad metadata.

    python -m carryon_sim.harness.fakes.openpi_server --port 8000 [--delay-s 0.05] [--fault nan]

From Python::

    with FakeOpenpiServer(delay_s=0.01) as server:   # port 0: a free port
        policy = make_openpi_policy(PolicyConfig(backend="openpi_remote", remote_uri=server.uri))
    uri, stop = serve_in_background(delay_s=0.0)      # or without a with-block
"""

from __future__ import annotations

import argparse
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import numpy as np
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.sync.server import Server, ServerConnection, serve

from carryon_policy.core.openpi_client import packb, unpackb

FAULTS = ("none", "nan", "wrong_shape", "no_actions", "close", "error", "no_metadata", "bad_metadata")
STEP_M = 0.002  # the fake policy's motion per step along x, metres


@dataclass
class FakeBehaviour:
    """How the fake server answers. Change fields while it serves; the next message obeys.

    delay_s: extra seconds before each reply. fault: one of FAULTS ('none' = well-behaved).
    horizon, action_dim: shape of each action chunk (H, D). answer: computes the chunk
    from the request instead (a stand-in that reads what the client sent).
    """

    delay_s: float = 0.0
    fault: str = "none"
    horizon: int = 10
    action_dim: int = 7
    metadata: dict[str, Any] = field(default_factory=lambda: {"server": "carryon fake openpi server"})
    answer: Callable[[dict[str, Any]], np.ndarray] | None = None


def fake_actions(horizon: int, action_dim: int) -> np.ndarray:
    """The fake policy's chunk: (horizon, action_dim) float32, +STEP_M along x per step."""
    actions = np.zeros((horizon, action_dim), dtype=np.float32)
    actions[:, 0] = STEP_M
    return actions


class FakeOpenpiServer:
    """The fake server on a background thread; `uri` once started. A context manager."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, **behaviour: Any) -> None:
        self.behaviour = FakeBehaviour(**behaviour)
        self.requests: list[dict[str, Any]] = []  # every observation received, in order
        self.connections = 0  # connections accepted so far
        self.headers: list[dict[str, str]] = []  # HTTP headers of each connection's handshake
        self._host = host
        self._port = port
        self._server: Server | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._open: set[ServerConnection] = set()

    @property
    def uri(self) -> str:
        if self._server is None:
            raise RuntimeError("the fake openpi server is not running")
        host, port = self._server.socket.getsockname()[:2]
        return f"ws://{host}:{port}"

    def start(self) -> FakeOpenpiServer:
        self._server = serve(self._handle, self._host, self._port, compression=None, max_size=None)
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-openpi-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close every open connection (within a second or so)."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
        with self._lock:
            connections = list(self._open)
        for connection in connections:
            connection.close()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def __enter__(self) -> FakeOpenpiServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _handle(self, connection: ServerConnection) -> None:
        with self._lock:
            self.connections += 1
            self._open.add(connection)
            if connection.request is not None:
                self.headers.append(dict(connection.request.headers.raw_items()))
        try:
            self._serve(connection)
        except ConnectionClosed:
            pass
        finally:
            with self._lock:
                self._open.discard(connection)

    def _serve(self, connection: ServerConnection) -> None:
        fault = self.behaviour.fault
        if fault == "no_metadata":
            self._stopping.wait()
            return
        connection.send(b"\xc1 not msgpack" if fault == "bad_metadata" else packb(self.behaviour.metadata))
        while not self._stopping.is_set():
            frame = connection.recv()
            if isinstance(frame, str):  # the protocol sends observations as binary frames only
                connection.close(CloseCode.INVALID_DATA, "expected a binary msgpack frame")
                return
            request = unpackb(frame)
            started = time.monotonic()
            behaviour = self.behaviour
            with self._lock:
                self.requests.append(request)
            if behaviour.delay_s > 0.0 and self._stopping.wait(behaviour.delay_s):
                return
            if behaviour.fault == "close":
                connection.close()
                return
            if behaviour.fault == "error":
                try:
                    raise RuntimeError("fake inference failure")
                except RuntimeError:
                    connection.send(traceback.format_exc())
                connection.close(
                    CloseCode.INTERNAL_ERROR, "Internal server error. Traceback included in previous frame."
                )
                return
            if behaviour.answer is not None:
                actions = behaviour.answer(request)
            else:
                actions = fake_actions(behaviour.horizon, behaviour.action_dim)
            if behaviour.fault == "nan":
                actions[1, 0] = np.nan
            elif behaviour.fault == "wrong_shape":
                actions = actions[:, 0]
            reply: dict[str, Any] = {"server_timing": {"infer_ms": (time.monotonic() - started) * 1000.0}}
            if behaviour.fault != "no_actions":
                reply["actions"] = actions
            connection.send(packb(reply))


def serve_in_background(port: int = 0, delay_s: float = 0.0, **behaviour: Any) -> tuple[str, Callable[[], None]]:
    """Start a fake server on 127.0.0.1:`port` (0 = a free port); returns (uri, stop)."""
    server = FakeOpenpiServer(port=port, delay_s=delay_s, **behaviour).start()
    return server.uri, server.stop


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (0 = any free one; default 8000)")
    parser.add_argument("--delay-s", type=float, default=0.0, help="extra delay per inference, seconds")
    parser.add_argument("--fault", choices=FAULTS, default="none", help="misbehaviour to simulate")
    parser.add_argument("--horizon", type=int, default=10, help="steps per action chunk")
    parser.add_argument("--action-dim", type=int, default=7, help="values per action step")
    args = parser.parse_args(argv)
    server = FakeOpenpiServer(
        args.host, args.port, delay_s=args.delay_s, fault=args.fault, horizon=args.horizon, action_dim=args.action_dim
    ).start()
    print(f"fake openpi server on {server.uri} (Ctrl-C stops it)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
