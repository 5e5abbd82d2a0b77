"""The one OpenAI-compatible client over real HTTP against the local stub server: text and
image parts on the wire, JSON mode and the schema in the request, retries with backoff on
transient errors only, timeouts and unreachable endpoints -> LlmError."""

from __future__ import annotations

import time

import pytest

from carryon_common.core.llm import ChatMessage, ImagePart, LlmError
from carryon_common.core.openai_client import OpenAiClient, ResponseFormat, response_format, wire_messages
from carryon_sim.harness.fakes.openai_server import StubReply, StubVlmServer

PNG = b"\x89PNG\r\n\x1a\n-not-a-real-png"
SCHEMA = {"title": "Plan", "type": "object", "properties": {"reply": {"type": "string"}}, "required": ["reply"]}


class Sleeps:
    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def client(stub: StubVlmServer, **kwargs: object) -> OpenAiClient:
    options: dict[str, object] = {"model": "stub", "api_key": "x", "timeout_s": 5.0, "attempts": 1, **kwargs}
    return OpenAiClient(stub.base_url, **options)  # type: ignore[arg-type]


def test_text_and_image_parts_are_serialised_in_order() -> None:
    image = ImagePart.from_bytes(PNG, "image/png")
    assert image.url.startswith("data:image/png;base64,")
    messages = [ChatMessage("system", "rules"), ChatMessage("user", ("BASELINE:", image, "CURRENT:", image))]
    with StubVlmServer([{"reply": "ok"}]) as stub:
        assert client(stub).complete(messages) == '{"reply": "ok"}'
        (request,) = stub.requests
    assert request.body["model"] == "stub" and request.body["temperature"] == 0.0
    assert request.messages[0] == {"role": "system", "content": "rules"}
    assert request.texts() == ["rules", "BASELINE:", "CURRENT:"]
    assert request.image_urls() == [image.url, image.url]
    assert [p["type"] for p in request.messages[1]["content"]] == ["text", "image_url", "text", "image_url"]
    assert wire_messages(messages)[1]["content"][1] == {"type": "image_url", "image_url": {"url": image.url}}
    assert messages[1].text == "BASELINE:\nCURRENT:" and messages[1].images == (image, image)
    with pytest.raises(ValueError, match="image mime"):
        ImagePart.from_bytes(PNG, "image/gif")


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (ResponseFormat.JSON_OBJECT, {"type": "json_object"}),
        (ResponseFormat.JSON_OBJECT_SCHEMA, {"type": "json_object", "schema": SCHEMA}),
        (
            ResponseFormat.JSON_SCHEMA,
            {"type": "json_schema", "json_schema": {"name": "Plan", "schema": SCHEMA, "strict": False}},
        ),
        (ResponseFormat.NONE, None),
    ],
)
def test_json_mode_and_the_schema_in_the_request(kind: ResponseFormat, expected: object) -> None:
    with StubVlmServer([{"reply": "ok"}]) as stub:
        client(stub, response_format=kind).complete([ChatMessage("user", "plan")], SCHEMA)
        assert stub.requests[0].body.get("response_format") == expected
    assert response_format(kind, None) == (None if kind == ResponseFormat.NONE else {"type": "json_object"})


def test_a_503_is_retried_after_a_backoff_then_succeeds() -> None:
    sleeps = Sleeps()
    with StubVlmServer([StubReply(status=503), StubReply(status=429), {"reply": "ok"}]) as stub:
        llm = client(stub, attempts=3, backoff_s=0.25, sleep=sleeps)
        assert llm.complete([ChatMessage("user", "plan")], SCHEMA) == '{"reply": "ok"}'
        assert len(stub.requests) == 3
    assert sleeps.waits == [0.25, 0.5]


def test_a_4xx_is_not_retried_and_says_what_the_server_answered() -> None:
    with StubVlmServer([StubReply(status=401), {"reply": "never"}]) as stub:
        with pytest.raises(LlmError, match=r"answered HTTP 401: .*stub error 401"):
            client(stub, attempts=3, sleep=Sleeps()).complete([ChatMessage("user", "plan")])
        assert len(stub.requests) == 1


def test_retries_give_up_with_the_last_problem() -> None:
    with (
        StubVlmServer([StubReply(status=500), StubReply(status=503)]) as stub,
        pytest.raises(LlmError, match=r"failed 2 attempts; last: HTTP 503"),
    ):
        client(stub, attempts=2, sleep=Sleeps()).complete([ChatMessage("user", "plan")])


def test_a_timeout_is_an_llm_error_within_the_bound() -> None:
    slow = StubReply({"reply": "late"}, delay_s=1.5)
    with StubVlmServer([slow, slow]) as stub:
        began = time.monotonic()
        with pytest.raises(LlmError, match=r"no reply within 0\.3 s"):
            client(stub, timeout_s=10.0).complete([ChatMessage("user", "plan")], timeout_s=0.3)  # per-call bound
        assert time.monotonic() - began < 1.4
        with pytest.raises(LlmError, match=r"no reply within 0\.2 s"):
            client(stub, timeout_s=0.2).complete([ChatMessage("user", "plan")])  # the configured bound


def test_an_unreachable_endpoint_is_an_llm_error() -> None:
    llm = OpenAiClient("http://127.0.0.1:9/v1", model="m", timeout_s=2.0, attempts=1)
    with pytest.raises(LlmError, match="cannot connect"):
        llm.complete([ChatMessage("user", "plan")])
