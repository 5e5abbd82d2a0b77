"""The vlm backend against the local OpenAI-compatible stub server (scripted replies,
recorded requests): images attached, rules in the prompt, malformed replies retried and
never turned into success, timeouts bounded."""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
from judge_fixtures import OBSERVE, PLACE, rgb_request

from carryon_judge.core.config import JudgeConfig
from carryon_judge.core.types import JudgeRequest, VerdictStatus
from carryon_judge.core.vlm import RULE_MARKERS, VlmJudge, VlmParams, vlm_client
from carryon_sim.harness.fakes.openai_server import StubReply, StubVlmServer


def reply(status: str = "running", **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "status": status, "reason": "what I see", "placed_object": None, "identity_certain": False,
        "goal_present_at_baseline": False, "target_changed": True, "revealed_contents": None,
        "scene_update_required": False,
    }  # fmt: skip
    return {**base, **fields}


def judge_with(stub: StubVlmServer, **overrides: Any) -> VlmJudge:
    config = JudgeConfig(vlm_base_url=stub.base_url, vlm_model="stub-model", stuck_timeout_s=10.0, **overrides)
    return VlmJudge(vlm_client(config, api_key="x"), VlmParams.from_config(config))


def ask(replies: list[Any], request: JudgeRequest | None = None, **overrides: Any):  # type: ignore[no-untyped-def]
    with StubVlmServer(replies) as stub:
        verdict = judge_with(stub, **overrides).judge(request or rgb_request())
    return verdict, stub


def test_request_attaches_baseline_and_current_images_and_states_every_rule() -> None:
    verdict, stub = ask([reply("running")])
    assert verdict.status == VerdictStatus.RUNNING and verdict.backend == "vlm"
    (request,) = stub.requests
    body = request.body
    assert body["model"] == "stub-model"
    assert body["response_format"] == {"type": "json_object"} and body["temperature"] == 0.0
    urls = request.image_urls()
    assert len(urls) == 2  # baseline + current of the one camera
    assert all(u.startswith("data:image/jpeg;base64,") for u in urls)
    assert base64.b64decode(urls[0].split(",", 1)[1])[:2] == b"\xff\xd8"  # a JPEG
    text = "\n".join(request.texts())
    for marker in RULE_MARKERS:
        assert marker in text, marker
    assert "objective: the carrot in the bowl" in text
    assert "instruction: put the carrot in the bowl" in text
    assert "s1: uncover the carrot" in text  # completed subtasks, to exclude their work
    assert text.index("BASELINE image") < text.index("CURRENT image")


def test_png_images_when_configured() -> None:
    _, stub = ask([reply()], vlm_image_format="png")
    assert all(u.startswith("data:image/png;base64,") for u in stub.requests[0].image_urls())


def test_no_response_format_when_json_mode_is_off() -> None:
    _, stub = ask([reply()], vlm_json_mode=False)
    assert "response_format" not in stub.requests[0].body


def test_success_with_the_right_object_newly_placed() -> None:
    verdict, _ = ask([reply("success", placed_object="carrot", identity_certain=True)])
    assert verdict.status == VerdictStatus.SUCCESS


@pytest.mark.parametrize(
    "fields",
    [
        {"placed_object": "meat", "identity_certain": True},  # a different object
        {"placed_object": "carrot", "identity_certain": False},  # identity uncertain
        {"placed_object": None, "identity_certain": True},  # nothing identified
        {"placed_object": "carrot", "identity_certain": True, "goal_present_at_baseline": True},  # already there
    ],
)
def test_success_is_ruled_out_without_the_models_own_evidence(fields: dict[str, Any]) -> None:
    verdict, _ = ask([reply("success", **fields)])
    assert verdict.status == VerdictStatus.RUNNING
    assert "success ruled out" in verdict.reason


def test_stuck_timeout_fails_a_running_subtask_unless_already_placed() -> None:
    stuck = JudgeRequest(PLACE, rgb_request().baseline, rgb_request().current, 30.0, since_progress_s=12.0)
    verdict, _ = ask([reply("running")], stuck)
    assert verdict.status == VerdictStatus.FAILED and "stuck timeout" in verdict.reason
    placed = reply("running", placed_object="carrot", identity_certain=True)
    guarded, _ = ask([placed], stuck)
    assert guarded.status == VerdictStatus.SUCCESS and "already-placed guard" in guarded.reason
    failed, _ = ask([reply("failed", placed_object="carrot", identity_certain=True)])
    assert failed.status == VerdictStatus.SUCCESS  # a failed verdict never undoes a completed placement


def test_observe_reports_revealed_contents_independently_of_status() -> None:
    base = rgb_request()
    request = JudgeRequest(OBSERVE, base.baseline, base.current, 2.0)
    verdict, _ = ask([reply("running", revealed_contents=["Carrot"], scene_update_required=False)], request)
    assert verdict.status == VerdictStatus.RUNNING
    assert verdict.revealed_contents == ("carrot",) and verdict.scene_update_required
    nothing, _ = ask([reply("success", revealed_contents=[], scene_update_required=True)], request)
    assert nothing.revealed_contents == () and not nothing.scene_update_required
    placed, _ = ask([reply("running", revealed_contents=["meat"])])  # not an observe subtask
    assert placed.revealed_contents == ()


@pytest.mark.parametrize(
    "bad",
    [
        "this is not json",
        '{"status": "success"',  # truncated
        reply("done"),  # unknown status
        {k: v for k, v in reply("success", placed_object="carrot", identity_certain=True).items() if k != "reason"},
        "[1, 2, 3]",  # not an object
        StubReply(status=500),
    ],
)
def test_bad_replies_are_retried_then_unable_to_judge_never_success(bad: Any) -> None:
    verdict, stub = ask([bad, bad, bad], vlm_retries=2)
    assert verdict.status == VerdictStatus.UNABLE_TO_JUDGE
    assert len(stub.requests) == 3
    if not isinstance(bad, StubReply):  # the retry tells the model what was wrong
        assert "Your reply was invalid" in stub.requests[1].texts()[-1]


def test_a_valid_reply_after_a_malformed_one_is_used() -> None:
    verdict, stub = ask(["{oops", reply("success", placed_object="carrot", identity_certain=True)])
    assert verdict.status == VerdictStatus.SUCCESS and len(stub.requests) == 2


def test_fenced_json_is_accepted() -> None:
    fenced = '```json\n{"status": "running", "reason": "r", "placed_object": null, "identity_certain": false, ' \
        '"goal_present_at_baseline": false, "target_changed": false, "revealed_contents": null, ' \
        '"scene_update_required": false}\n```'  # fmt: skip
    verdict, _ = ask([fenced])
    assert verdict.status == VerdictStatus.RUNNING


def test_slow_server_is_bounded_by_the_total_timeout() -> None:
    slow = StubReply(content=reply("success"), delay_s=1.0)
    began = time.monotonic()
    verdict, _ = ask([slow, slow, slow], vlm_request_timeout_s=0.3, vlm_total_timeout_s=0.8, vlm_retries=5)
    assert verdict.status == VerdictStatus.UNABLE_TO_JUDGE
    assert "no reply within" in verdict.reason
    assert time.monotonic() - began < 2.5


def test_missing_images_are_unable_to_judge_without_a_request() -> None:
    from carryon_judge.core.types import Observation

    empty = JudgeRequest(PLACE, Observation(1, 0.0), Observation(2, 1.0), 1.0)
    verdict, stub = ask([reply("success")], empty)
    assert verdict.status == VerdictStatus.UNABLE_TO_JUDGE and "no color image" in verdict.reason
    assert stub.requests == []


def test_unreachable_endpoint_is_unable_to_judge() -> None:
    config = JudgeConfig(vlm_base_url="http://127.0.0.1:9/v1", vlm_model="m", vlm_request_timeout_s=0.5)
    judge = VlmJudge(vlm_client(config), VlmParams(10.0, 0.5, 1.0, retries=1))
    assert judge.judge(rgb_request()).status == VerdictStatus.UNABLE_TO_JUDGE


def test_stub_server_serves_models_and_503_when_the_script_is_used_up() -> None:
    from openai import OpenAI

    with StubVlmServer() as stub:
        client = OpenAI(base_url=stub.base_url, api_key="x", max_retries=0)
        assert [m.id for m in client.models.list()] == ["stub-vlm"]
        with pytest.raises(Exception, match="503"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert len(stub.requests) == 1
