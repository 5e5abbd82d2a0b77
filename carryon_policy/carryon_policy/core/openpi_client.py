"""openpi_remote: a client of Physical Intelligence's openpi policy-server protocol, so a
real pi0 / pi0.5 (or any server speaking it) runs on a GPU machine while the policy node
runs beside the robot.

The protocol (openpi's websocket_policy_server / openpi_client), one websocket:
* on connect the server sends its metadata: one binary frame, a msgpack map;
* per inference the client sends the observation (msgpack map of numpy arrays and a
  prompt string) and the server answers with a map holding "actions" (H, D) and
  "server_timing" {"infer_ms": ...};
* when inference fails the server sends the traceback as a text frame and closes.
numpy arrays travel as msgpack maps {b"__ndarray__": True, b"data": raw bytes,
b"dtype": dtype.str, b"shape": [...]}; numpy scalars as {b"__npgeneric__": True, ...}.
openpi's own `openpi-client` package pins numpy < 2 and pulls dm-tree, so this module
implements the small codec with plain `msgpack`.

Every wait is bounded: connecting plus the metadata within `remote_connect_timeout_s`,
each reply within `remote_timeout_s`. Any failure raises PolicyUnavailable and drops the
connection (a late reply must never be read as the answer to the next request); the next
`reset` or `infer` connects again.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Any

import msgpack  # type: ignore[import-untyped]  # ships no type information
import numpy as np
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.protocol import State
from websockets.sync.client import ClientConnection, connect

from carryon_common.core.errors import ConfigError
from carryon_policy.core.action_mapping import ActionMapper, Kinematics, mapped_metadata
from carryon_policy.core.config import PolicyConfig
from carryon_policy.core.observation_mapping import ObservationMapper
from carryon_policy.core.policy import (
    InvalidAction,
    Observation,
    PolicyMetadata,
    PolicyOutput,
    PolicyUnavailable,
)

# Largest message accepted from the server (its replies are a few kilobytes).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# Characters of a server traceback kept in the error message (the whole one is on the exception).
TRACEBACK_TAIL_CHARS = 600
# Errors a malformed message raises while decoding.
_DECODE_ERRORS = (ValueError, TypeError, KeyError)


class RemoteServerError(PolicyUnavailable):
    """The server's inference failed; `server_traceback` is the text it sent."""

    def __init__(self, message: str, server_traceback: str) -> None:
        super().__init__(message)
        self.server_traceback = server_traceback


# --- msgpack with numpy arrays, as openpi's msgpack_numpy encodes them -------------------


def _encode(obj: object) -> object:
    if isinstance(obj, np.ndarray | np.generic) and obj.dtype.kind in "VOc":
        raise TypeError(f"numpy dtype {obj.dtype} cannot be sent")
    if isinstance(obj, np.ndarray):
        array = np.ascontiguousarray(obj)
        return {b"__ndarray__": True, b"data": array.tobytes(), b"dtype": array.dtype.str, b"shape": array.shape}
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot encode {type(obj).__name__} as msgpack")


def _decode(obj: dict[Any, Any]) -> object:
    if b"__ndarray__" in obj:
        dtype = np.dtype(obj[b"dtype"])
        if dtype.kind in "VO":
            raise ValueError(f"refusing numpy dtype {dtype} from the wire")
        shape = tuple(int(n) for n in obj[b"shape"])
        return np.frombuffer(obj[b"data"], dtype=dtype).reshape(shape)
    if b"__npgeneric__" in obj:
        dtype = np.dtype(obj[b"dtype"])
        if dtype.kind in "VO":
            raise ValueError(f"refusing numpy dtype {dtype} from the wire")
        return dtype.type(obj[b"data"])
    return obj


def packb(obj: object) -> bytes:
    """msgpack bytes of `obj` (maps, lists, strings, numbers, numpy arrays and scalars)."""
    data: bytes = msgpack.packb(obj, default=_encode, use_bin_type=True)
    return data


def unpackb(data: bytes) -> Any:
    """Inverse of packb. Raises ValueError (or a msgpack error) on malformed data."""
    return msgpack.unpackb(data, object_hook=_decode, raw=False)


# --- the client ---------------------------------------------------------------------------


def build_request(
    observation: Observation, mapper: ObservationMapper, instruction: str, prompt_key: str
) -> dict[str, object]:
    """The observation map sent to the server: images (H, W, 3) uint8 and state vectors
    float32 under the policy's keys, and the instruction under `prompt_key` ('' = none)."""
    request: dict[str, object] = dict(mapper.images(observation))
    for key, state in mapper.states(observation).items():
        request[key] = state.astype(np.float32)
    if prompt_key:
        request[prompt_key] = instruction
    return request


def _server_infer_s(reply: Mapping[str, Any]) -> float:
    timing = reply.get("server_timing")
    if isinstance(timing, Mapping):
        infer_ms = timing.get("infer_ms")
        if isinstance(infer_ms, int | float | np.number) and np.isfinite(infer_ms):
            return float(infer_ms) / 1000.0
    return 0.0


class OpenpiRemotePolicy:
    """`Policy` backed by a remote openpi policy server (see the module docstring).

    `reset` stores the instruction (sent as the prompt of every request; the protocol has
    no episode reset, and the seed is unused: sampling happens on the server) and connects
    when not connected. `server_metadata` is the map the server sent on connect.
    """

    def __init__(
        self,
        uri: str,
        observations: ObservationMapper,
        actions: ActionMapper,
        *,
        connect_timeout_s: float,
        timeout_s: float,
        prompt_key: str = "prompt",
        api_key: str = "",
    ) -> None:
        self._uri = uri
        self._observations = observations
        self._actions = actions
        self._connect_timeout_s = connect_timeout_s
        self._timeout_s = timeout_s
        self._prompt_key = prompt_key
        self._api_key = api_key
        self._lock = threading.Lock()
        self._ws: ClientConnection | None = None
        self._instruction = ""
        self.server_metadata: dict[str, Any] = {}
        self._metadata = mapped_metadata("openpi_remote", f"openpi policy server at {uri}", observations, actions)

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    @property
    def connected(self) -> bool:
        return self._ws is not None

    def reset(self, instruction: str, seed: int) -> None:  # noqa: ARG002 - the server samples, unseeded
        with self._lock:
            self._instruction = instruction
            if self._ws is None:
                self._connect()

    def infer(self, observation: Observation) -> PolicyOutput:
        request = packb(build_request(observation, self._observations, self._instruction, self._prompt_key))
        with self._lock:
            if self._ws is None:
                self._connect()
            reply = self._exchange(request)
        if not isinstance(reply, Mapping) or "actions" not in reply:
            keys = ", ".join(sorted(str(k) for k in reply)) if isinstance(reply, Mapping) else type(reply).__name__
            raise PolicyUnavailable(f"protocol mismatch: the reply of {self._uri} has no 'actions' (got {keys})")
        actions = reply["actions"]
        if not isinstance(actions, np.ndarray):
            raise InvalidAction(f"'actions' from {self._uri} is a {type(actions).__name__}, not an array")
        return self._actions.to_output(actions, observation, _server_infer_s(reply))

    def unavailable(self) -> str | None:
        """Why the server cannot serve an inference now (None: connected, or it accepts a
        connection now). Never waits behind an inference under way: that one answers for it."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if self._ws is not None and self._ws.state is not State.OPEN:
                self._drop(wait=False)  # the server went away since the last exchange
            if self._ws is None:
                self._connect()
        except PolicyUnavailable as exc:
            return str(exc)
        finally:
            self._lock.release()
        return None

    def close(self) -> None:
        with self._lock:
            self._drop()

    # -- connection handling (callers hold the lock) --

    def _connect(self) -> None:
        headers = {"Authorization": f"Api-Key {self._api_key}"} if self._api_key else None
        deadline = time.monotonic() + self._connect_timeout_s
        try:
            ws = connect(
                self._uri,
                open_timeout=self._connect_timeout_s,
                close_timeout=1.0,
                compression=None,
                max_size=MAX_MESSAGE_BYTES,
                additional_headers=headers,
                proxy=None,
                legacy=True,  # one long-lived connection that this object closes
            )
        except TimeoutError:
            raise PolicyUnavailable(
                f"policy server {self._uri} did not accept a connection within {self._connect_timeout_s:g} s"
            ) from None
        except (OSError, InvalidHandshake, InvalidURI) as exc:
            raise PolicyUnavailable(f"cannot connect to policy server {self._uri}: {exc}") from None
        self._ws = ws
        frame = self._receive(max(0.0, deadline - time.monotonic()), "metadata")
        try:
            metadata = unpackb(frame)
        except _DECODE_ERRORS as exc:
            self._drop()
            raise PolicyUnavailable(f"{self._uri} is not an openpi policy server (metadata: {exc})") from None
        if not isinstance(metadata, dict):
            self._drop()
            raise PolicyUnavailable(f"{self._uri} is not an openpi policy server (metadata is not a map)")
        self.server_metadata = metadata

    def _exchange(self, request: bytes) -> Any:
        assert self._ws is not None
        try:
            self._ws.send(request)
        except (ConnectionClosed, OSError) as exc:
            self._drop()
            raise PolicyUnavailable(f"policy server {self._uri} closed the connection ({exc})") from None
        frame = self._receive(self._timeout_s, "reply")
        try:
            return unpackb(frame)
        except _DECODE_ERRORS as exc:
            self._drop()
            raise PolicyUnavailable(f"protocol mismatch: cannot decode the reply of {self._uri} ({exc})") from None

    def _receive(self, timeout_s: float, what: str) -> bytes:
        """One binary frame within timeout_s; any failure drops the connection."""
        assert self._ws is not None
        try:
            frame = self._ws.recv(timeout=timeout_s)
        except TimeoutError:
            self._drop(wait=False)  # a server stuck in inference may not answer the close handshake either
            raise PolicyUnavailable(
                f"policy server {self._uri} sent no {what} within {timeout_s:g} s; connection closed "
                "(the next inference reconnects)"
            ) from None
        except ConnectionClosed as exc:
            self._drop()
            raise PolicyUnavailable(f"policy server {self._uri} closed the connection ({exc})") from None
        if isinstance(frame, str):  # openpi sends the traceback of a failed inference as text, then closes
            self._drop()
            tail = frame.strip()[-TRACEBACK_TAIL_CHARS:]
            raise RemoteServerError(f"policy server {self._uri} failed: {tail}", frame)
        return frame

    def _drop(self, wait: bool = True) -> None:
        """Forget the connection and close it (wait=False: in the background, so that the
        caller's error is not delayed by up to close_timeout)."""
        if self._ws is not None:
            ws, self._ws = self._ws, None
            if wait:
                ws.close()
            else:
                threading.Thread(target=ws.close, name="openpi-close", daemon=True).start()


def make_openpi_policy(config: PolicyConfig, kinematics: Kinematics | None = None) -> OpenpiRemotePolicy:
    """The openpi_remote backend from config. Raises ConfigError on an inconsistent
    configuration; does not connect (reset and infer do)."""
    if not config.remote_uri:
        raise ConfigError("backend openpi_remote needs remote_uri, e.g. ws://gpu-box:8000")
    observations = ObservationMapper.from_config(config)
    missing = [b.camera for b in observations.cameras if b.camera not in config.cameras]
    if missing:
        raise ConfigError(
            f"vla_cameras reads robot camera(s) {', '.join(missing)} that are not in cameras "
            f"({', '.join(config.cameras) or 'none'})"
        )
    api_key = ""
    if config.remote_api_key_env:
        api_key = os.environ.get(config.remote_api_key_env, "")
        if not api_key:
            raise ConfigError(f"remote_api_key_env names {config.remote_api_key_env!r}, which is unset or empty")
    return OpenpiRemotePolicy(
        config.remote_uri,
        observations,
        ActionMapper.from_config(config, config.chunk_horizon, kinematics),
        connect_timeout_s=config.remote_connect_timeout_s,
        timeout_s=config.remote_timeout_s,
        prompt_key=config.remote_prompt_key,
        api_key=api_key,
    )
