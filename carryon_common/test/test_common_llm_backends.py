"""LLM backends by name: the registry's typo suggestion, the scripted backend (NOT AN LLM:
replies chosen by what the request asks for, clear errors for a bad script), and the key rule
of the openai backend. (The planner's config as an LlmConfig: test_planner_scripted_llm.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from carryon_common.core.errors import ConfigError, UnknownNameError
from carryon_common.core.llm import ChatMessage, ImagePart, LlmError
from carryon_common.core.llm_backends import LLM_BACKENDS, LlmSettings, make_llm
from carryon_common.core.scripted_llm import ScriptedLlm


def test_backends_by_name_with_a_suggestion_on_a_typo() -> None:
    assert LLM_BACKENDS.names() == ["local", "local_inprocess", "openai", "scripted"]
    with pytest.raises(UnknownNameError, match="did you mean 'openai'"):
        make_llm(LlmSettings(llm_backend="opneai"))


def test_the_first_matching_entry_answers(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(
        "replies:\n"
        "  - {when: {schema: Plan, contains: again}, reply: 'second'}\n"
        "  - {when: {schema: Plan}, reply: {reply: first}}\n"
        "  - {when: {lacks: nothing}, reply: any}\n"
    )
    llm = make_llm(LlmSettings(llm_backend="scripted", llm_script_file=str(script)))
    assert isinstance(llm, ScriptedLlm)
    assert llm.complete([ChatMessage("user", "plan it")], {"title": "Plan"}) == '{"reply": "first"}'
    assert llm.complete([ChatMessage("user", ("plan it", ImagePart("data:,"), "again"))], {"title": "Plan"}) == "second"
    assert llm.complete([ChatMessage("user", "x")]) == "any"  # no schema: only entries without one match
    with pytest.raises(LlmError, match="no scripted reply"):
        llm.complete([ChatMessage("user", "nothing")], {"title": "Summary"})
    assert llm.answered == 3 and "NOT AN LLM" in llm.name


def test_a_bad_script_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    script = tmp_path / "bad.yaml"
    script.write_text("replies:\n  - {when: {schema: Plan, sometimes: yes}, reply: x}\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml"):
        ScriptedLlm(script)


def test_a_remote_openai_endpoint_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CARRYON_TEST_KEY", raising=False)
    remote = LlmSettings(
        llm_backend="openai", llm_base_url="https://llm.example.com/v1", llm_api_key_env="CARRYON_TEST_KEY"
    )
    with pytest.raises(ConfigError, match="needs an API key"):
        make_llm(remote)
    local = LlmSettings(llm_backend="openai", llm_base_url="http://127.0.0.1:8089/v1", llm_model="m")
    assert make_llm(local).name == "openai:m@http://127.0.0.1:8089/v1"
    monkeypatch.setenv("CARRYON_TEST_KEY", "k")
    assert make_llm(remote).name == "openai:gpt-4o-mini@https://llm.example.com/v1"  # the default model


def test_a_missing_in_process_model_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):  # llama-cpp-python not installed, or the model file missing
        make_llm(LlmSettings(llm_backend="local_inprocess", llm_model_path=str(tmp_path / "none.gguf")))


def test_local_is_the_model_server_on_loopback_with_the_schema_in_each_request() -> None:
    """`local` speaks to llm_server_node (here the stub server in its place) through the
    OpenAI client: no key, the schema in response_format for llama.cpp's grammar."""
    from carryon_sim.harness.fakes.openai_server import StubVlmServer

    assert make_llm(LlmSettings(llm_backend="local")).name == "openai:local@http://127.0.0.1:8421/v1"
    with StubVlmServer([{"reply": "hi"}]) as stub:
        llm = make_llm(LlmSettings(llm_backend="local", llm_local_url=stub.base_url))
        schema = {"title": "Plan", "type": "object"}
        assert llm.complete([ChatMessage("user", "plan it")], schema) == '{"reply": "hi"}'
        assert stub.requests[0].body["response_format"] == {"type": "json_object", "schema": schema}
        assert stub.requests[0].body["model"] == "local"
        assert stub.requests[0].body["max_tokens"] == 768  # a small model that loops stops there


def test_a_local_server_that_is_down_is_an_error_saying_what_to_check() -> None:
    import socket

    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    llm = make_llm(LlmSettings(llm_backend="local", llm_local_url=f"http://127.0.0.1:{port}/v1", llm_timeout_s=5.0))
    with pytest.raises(LlmError, match=r"cannot connect.*llm_server_node.*carryon status"):
        llm.complete([ChatMessage("user", "plan it")], {"title": "Plan"})


def test_a_warm_up_has_the_server_read_the_messages_for_one_token() -> None:
    from carryon_common.core.openai_client import OpenAiClient
    from carryon_sim.harness.fakes.openai_server import StubVlmServer

    with StubVlmServer([{"reply": "x"}]) as stub:
        llm = make_llm(LlmSettings(llm_backend="local", llm_local_url=stub.base_url))
        assert isinstance(llm, OpenAiClient)
        llm.warm_up([ChatMessage("system", "rules"), ChatMessage("user", "hi")], timeout_s=5.0)
        body = stub.requests[0].body
        assert body["max_tokens"] == 1 and "response_format" not in body
        assert [m["content"] for m in body["messages"]] == ["rules", "hi"]
    with pytest.raises(LlmError, match="warm-up"):  # the server is gone
        llm.warm_up([ChatMessage("user", "hi")], timeout_s=2.0)
