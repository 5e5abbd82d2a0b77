"""A scripted OpenAI-compatible chat server for tests and benchmarks (standard library only).

Shared by the VLM judge, the planner and reflection tests (not used at run time).

Serves `POST /v1/chat/completions` (and `GET /v1/models`) on 127.0.0.1, answers each
request with the next scripted reply, and records every request body so tests can check
what a client sent (images attached, rules in the prompt, response_format, ...). Any
component that talks to an OpenAI-compatible endpoint (the VLM judge, the planner's LLM
backends) can be tested against it::

    from carryon_sim.harness.fakes.openai_server import StubReply, StubVlmServer

    with StubVlmServer([{"status": "success", ...}, "not json", StubReply(status=500)]) as stub:
        client = OpenAI(base_url=stub.base_url, api_key="x", max_retries=0)
        ...
        assert stub.requests[0].body["messages"][0]["role"] == "system"

A reply is a `dict` (sent as its JSON text), a `str` (sent verbatim as the message
content, e.g. malformed JSON), or a `StubReply` (an HTTP error status, a delay, or both).
When the script is used up, `default` is sent (an HTTP 503 when `default` is None).

Run by hand: `python -m carryon_sim.harness.fakes.openai_server --port 8089 --reply '{"status": ...}'`.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class StubReply:
    """content: the message text (a dict is sent as JSON); status: HTTP status (200 = a
    normal completion; anything else is an error body); delay_s: wait before answering."""

    content: str | dict[str, Any] = ""
    status: int = 200
    delay_s: float = 0.0


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    received_s: float  # time.monotonic() at arrival

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self.body.get("messages", [])
        return messages

    def texts(self) -> list[str]:
        """Every text part of every message, in order."""
        out = []
        for message in self.messages:
            content = message.get("content")
            if isinstance(content, str):
                out.append(content)
            elif isinstance(content, list):
                out += [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return out

    def image_urls(self) -> list[str]:
        """The `image_url.url` of every attached image, in order."""
        urls = []
        for message in self.messages:
            content = message.get("content")
            if isinstance(content, list):
                urls += [p["image_url"]["url"] for p in content if isinstance(p, dict) and p.get("type") == "image_url"]
        return urls


@dataclass
class StubVlmServer:
    """The server; a context manager that starts it on a free port and stops it."""

    replies: Iterable[str | dict[str, Any] | StubReply] = ()
    default: str | dict[str, Any] | StubReply | None = None
    model: str = "stub-vlm"
    host: str = "127.0.0.1"
    port: int = 0
    requests: list[RecordedRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._script: deque[str | dict[str, Any] | StubReply] = deque(self.replies)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control -------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:<port>/v1` (what OpenAI(base_url=...) takes)."""
        if self._server is None:
            raise RuntimeError("the stub server is not running")
        return f"http://{self.host}:{self._server.server_address[1]}/v1"

    def push(self, *replies: str | dict[str, Any] | StubReply) -> None:
        """Append scripted replies."""
        with self._lock:
            self._script.extend(replies)

    def start(self) -> StubVlmServer:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate writes: without TCP_NODELAY, Nagle's
            # algorithm and delayed ACKs add ~40 ms to every keep-alive request.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": stub.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "request body is not JSON"}})
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                stub._record(RecordedRequest(self.path, dict(self.headers.items()), body, time.monotonic()))
                reply = stub._next()
                if reply.delay_s > 0:
                    time.sleep(reply.delay_s)
                if reply.status != 200:
                    self._send(reply.status, {"error": {"message": f"stub error {reply.status}", "type": "stub"}})
                    return
                content = reply.content if isinstance(reply.content, str) else json.dumps(reply.content)
                self._send(200, _completion(content, str(body.get("model", stub.model))))

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    pass

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="stub-vlm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None

    def __enter__(self) -> StubVlmServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # -- internals -----------------------------------------------------------------------
    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _next(self) -> StubReply:
        with self._lock:
            reply = self._script.popleft() if self._script else self.default
        if reply is None:
            return StubReply(status=503)
        return reply if isinstance(reply, StubReply) else StubReply(content=reply)


def _completion(content: str, model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="scripted OpenAI-compatible chat server (tests, demos)")
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--host", default="127.0.0.1", help="listen address (0.0.0.0: every interface)")
    parser.add_argument("--reply", action="append", default=[], help="reply content, in order (repeatable)")
    parser.add_argument("--default", default=None, help="reply once the script is used up (default: HTTP 503)")
    args = parser.parse_args(argv)
    with StubVlmServer(args.reply, default=args.default, host=args.host, port=args.port) as stub:
        print(f"stub VLM at {stub.base_url} (Ctrl-C stops)", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
