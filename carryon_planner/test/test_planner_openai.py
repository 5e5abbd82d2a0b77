"""Planning with the openai backend over real HTTP against the local stub server: JSON mode,
the plan schema in the prompt (or in the request), repair across requests, errors and
timeouts -> safe refusal. (The client itself: carryon_common/test/test_common_llm_openai_client.py.)"""

from __future__ import annotations

import json

from carryon_common.core.llm_backends import LlmSettings, make_llm
from carryon_common.core.openai_client import OpenAiClient
from carryon_planner.core.context import Endpoint, LibraryEntry, build_messages
from carryon_planner.core.repair import plan_with_repair
from carryon_planner.core.validator import PlanningFacts, Validator
from carryon_sim.harness.fakes.openai_server import StubReply, StubVlmServer

FACTS = PlanningFacts(
    request="Put the carrot in the bowl",
    instructions=("put the carrot in the bowl",),
    objects=frozenset({"carrot", "bowl"}),
    locations=frozenset({"kitchen_counter"}),
)
VALID = {
    "reply": "Putting the carrot in the bowl.",
    "subtasks": [{"id": "s1", "kind": "vla", "objective": "carrot in bowl", "instruction": "put the carrot in the bowl",
                  "target": "carrot", "destination": "bowl"}],
}  # fmt: skip


def messages():  # type: ignore[no-untyped-def]
    return build_messages(request=FACTS.request, user_id="alice", memory="", endpoints=[Endpoint("kitchen_counter")],
                          library=[LibraryEntry("put the carrot in the bowl")])  # fmt: skip


def llm(stub: StubVlmServer, timeout_s: float = 5.0) -> OpenAiClient:
    return OpenAiClient(
        base_url=stub.base_url, model="stub", api_key="x", timeout_s=timeout_s, attempts=2, backoff_s=0.0
    )


def test_a_plan_over_http_with_a_repair_round() -> None:
    paraphrased = json.loads(json.dumps(VALID))
    paraphrased["subtasks"][0]["instruction"] = "carrot to bowl"
    with StubVlmServer([paraphrased, VALID]) as stub:
        outcome = plan_with_repair(llm(stub), messages(), FACTS, max_repairs=2, validator=Validator())
        assert not outcome.refused and outcome.repairs == 1
        first, second = stub.requests
        assert first.body["response_format"] == {"type": "json_object"} and first.body["temperature"] == 0.0
        assert '"title":"Plan"' in first.messages[0]["content"]
        assert "instruction_in_library" in second.messages[-1]["content"]


def test_http_errors_and_timeouts_are_safe_refusals() -> None:
    with StubVlmServer([StubReply(status=500), StubReply(status=500)]) as stub:
        outcome = plan_with_repair(llm(stub), messages(), FACTS, max_repairs=2, validator=Validator())
        assert outcome.refused and outcome.plan.subtasks == [] and len(stub.requests) == 2  # retried once
    with StubVlmServer([StubReply(status=401, content="bad key")]) as stub:
        outcome = plan_with_repair(llm(stub), messages(), FACTS, max_repairs=2, validator=Validator())
        assert outcome.refused and "HTTP 401" in (outcome.plan.refusal or "") and len(stub.requests) == 1
    with StubVlmServer([StubReply(VALID, delay_s=2.0), StubReply(VALID, delay_s=2.0)]) as stub:
        outcome = plan_with_repair(llm(stub, timeout_s=0.5), messages(), FACTS, max_repairs=0, validator=Validator())
        assert outcome.refused and "no reply within 0.5 s" in (outcome.plan.refusal or "")


def test_the_schema_in_the_request_when_configured() -> None:
    with StubVlmServer([VALID]) as stub:
        settings = LlmSettings(llm_backend="openai", llm_base_url=stub.base_url, llm_schema_in_request=True)
        outcome = plan_with_repair(make_llm(settings), messages(), FACTS, max_repairs=0, validator=Validator())
        assert not outcome.refused
        response_format = stub.requests[0].body["response_format"]
        assert response_format["type"] == "json_object" and response_format["schema"]["title"] == "Plan"


def test_reference_images_reach_the_endpoint_as_image_parts() -> None:
    from carryon_planner.core.memory_ops import ReferenceImage

    mug = ReferenceImage("mug", "reference_image", "image/png", b"\x89PNG fake")
    with_image = build_messages(request=FACTS.request, user_id="alice", memory="", images=[mug],
                                endpoints=[Endpoint("kitchen_counter")],
                                library=[LibraryEntry("put the carrot in the bowl")])  # fmt: skip
    with StubVlmServer([VALID]) as stub:
        outcome = plan_with_repair(llm(stub), with_image, FACTS, max_repairs=0, validator=Validator())
        assert not outcome.refused
        parts = stub.requests[0].messages[1]["content"]
        kinds = [p["type"] for p in parts]
        assert kinds == ["text", "text", "image_url", "text"], kinds
        assert parts[1]["text"] == "mug.reference_image:"
        assert parts[2]["image_url"]["url"].startswith("data:image/png;base64,")
