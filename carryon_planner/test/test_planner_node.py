"""planner_node in-process with a real memory_node (seeded from config/memory) and a
scripted LLM: Ask plans with this user's memory only, writes durable facts, refuses
safely, and plan_only changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from planner_fixtures import ScriptedLlm
from rclpy.parameter import Parameter

from carryon_common.calls import RosSession
from carryon_interfaces.action import Assist
from carryon_interfaces.msg import PlanState
from carryon_interfaces.srv import Ask
from carryon_memory.node import MemoryNode
from carryon_planner.node import PlannerNode

REPO = Path(__file__).resolve().parents[2]
FOOD_PLAN = {
    "reply": "I'll look at the kitchen counter, then put the carrot in the bowl if it is under the pink cover.",
    "subtasks": [
        {"id": "s1", "kind": "observe", "objective": "see the counter", "target": "kitchen_counter"},
        {"id": "s2", "kind": "vla", "objective": "cover off", "instruction": "open the pink cover",
         "target": "pink_cover", "depends_on": ["s1"], "condition": "carrot under pink_cover"},
        {"id": "s3", "kind": "vla", "objective": "carrot in bowl", "instruction": "put the carrot in the bowl",
         "target": "carrot", "destination": "bowl", "depends_on": ["s2"], "condition": "carrot under pink_cover"},
    ],
}  # fmt: skip
REMEMBER = {
    "reply": "Noted: you prefer rye bread now.",
    "memory_operations": [{"op": "update_user", "entity": "bread", "key": "preference", "value": "rye",
                           "durable": True}],
}  # fmt: skip


def start(ros, tmp_path: Path, replies: list[str]) -> ScriptedLlm:  # type: ignore[no-untyped-def]
    memory = [Parameter("memory_dir", value=str(tmp_path / "memory")),
              Parameter("seed_dir", value=str(REPO / "config" / "memory"))]  # fmt: skip
    ros.add(MemoryNode(namespace="carryon", context=ros.context, parameter_overrides=memory))
    llm = ScriptedLlm(replies)
    full = [Parameter("plan_format", value="full")]  # the replies are full plans (test_planner_steps: step plans)
    ros.add(PlannerNode(llm, namespace="carryon", context=ros.context, parameter_overrides=full))
    return llm


def ask(text: str, user: str = "alice", plan_only: bool = False) -> Ask.Response:
    with RosSession("planner_client") as session:
        return session.call(Ask, "/carryon/planner/ask", Ask.Request(user_id=user, text=text, plan_only=plan_only),
                            timeout_s=20.0)  # fmt: skip


def test_a_request_is_planned_with_this_users_memory_only(ros, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    llm = start(ros, tmp_path, [json.dumps(FOOD_PLAN)])
    response = ask("Serve me food")
    assert response.status == Ask.Response.STATUS_OK, response.message
    assert response.plan.state == PlanState.STATE_VALIDATING
    assert [s.subtask.id for s in response.plan.subtasks] == ["s1", "s2", "s3"]
    assert "not dispatched" in response.message and response.reply.startswith("I'll look")
    prompt = llm.seen[0][1].content
    assert "vegetarian" in prompt and "carrot under pink_cover" in prompt
    assert "no restrictions" not in prompt  # bob's diet never reaches alice's planner


def test_durable_facts_are_written_unless_plan_only(ros, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    start(ros, tmp_path, [json.dumps(REMEMBER), json.dumps(REMEMBER)])
    alice = tmp_path / "memory" / "users" / "alice.md"
    response = ask("remember that I prefer rye bread", plan_only=True)
    assert response.status == Ask.Response.STATUS_OK and "rye" not in alice.read_text()
    response = ask("remember that I prefer rye bread")
    assert response.status == Ask.Response.STATUS_OK, response.message
    assert "- preference: rye" in alice.read_text() and "memory:" in response.message


def test_exhausted_repairs_are_a_safe_refusal(ros, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = json.dumps({**FOOD_PLAN, "subtasks": [{**FOOD_PLAN["subtasks"][1], "instruction": "lift the cover",
                                                 "depends_on": [], "condition": ""}]})  # fmt: skip
    start(ros, tmp_path, [bad, bad, bad])
    response = ask("open the cover")
    assert response.status == Ask.Response.STATUS_OK
    assert response.plan.state == PlanState.STATE_REFUSED and response.plan.subtasks == []
    assert "no valid plan after 2 repair round(s)" in response.message


def test_an_unknown_user_is_reported_by_memory(ros, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    start(ros, tmp_path, [])
    response = ask("Serve me food", user="../etc")
    assert response.status == Ask.Response.STATUS_INVALID_ARGUMENT and "memory:" in response.message


def test_meat_for_a_vegetarian_is_mended_into_a_refusal_that_says_why(ros, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    step = {"id": "s1", "kind": "vla", "objective": "meat in bowl", "instruction": "put the meat in the bowl",
            "target": "meat", "destination": "bowl"}  # fmt: skip
    meat = {"reply": "I'll put the meat in the bowl.", "subtasks": [step]}
    llm = start(ros, tmp_path, [json.dumps(meat)])
    response = ask("Give me the meat")
    assert response.plan.state == PlanState.STATE_REFUSED and response.plan.subtasks == []
    assert response.reply.startswith("Sorry, I did not do that") and "meat" in response.reply
    assert "vegetarian" in response.reply
    assert len(llm.seen) == 1 and "mended: [preference_conflict] dropped s1: meat" in response.message


def remember_mug(fmt: str = "png") -> bytes:
    import io

    from PIL import Image
    from sensor_msgs.msg import CompressedImage

    from carryon_interfaces.srv import RememberImage

    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (30, 60, 200)).save(buffer, format=fmt.upper())
    request = RememberImage.Request(user_id="alice", entity="mug", key="reference_image", source="pytest")
    request.image = CompressedImage(format=fmt, data=list(buffer.getvalue()))
    with RosSession("planner_client") as session:
        response = session.call(RememberImage, "/carryon/memory/remember_image", request, timeout_s=10.0, resend_s=2.0)
    assert response.status == RememberImage.Response.STATUS_OK, response.message
    return buffer.getvalue()


def start_with(ros, tmp_path: Path, replies: list[str], **params) -> ScriptedLlm:  # type: ignore[no-untyped-def]
    memory = [Parameter("memory_dir", value=str(tmp_path / "memory")),
              Parameter("seed_dir", value=str(REPO / "config" / "memory"))]  # fmt: skip
    ros.add(MemoryNode(namespace="carryon", context=ros.context, parameter_overrides=memory))
    llm = ScriptedLlm(replies)
    params = {"plan_format": "full", **params}  # the replies are full plans (test_planner_steps: step plans)
    overrides = [Parameter(k, value=v) for k, v in params.items()]
    ros.add(PlannerNode(llm, namespace="carryon", context=ros.context, parameter_overrides=overrides))
    return llm


def test_reference_images_go_to_an_image_capable_endpoint(ros, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import base64

    from carryon_common.core.llm import ImagePart

    llm = start_with(ros, tmp_path, [json.dumps({"reply": "Your mug is the blue one."})],
                     llm_backend="openai", llm_images=True)  # fmt: skip
    data = remember_mug()
    response = ask("Which one is my mug?", plan_only=True)
    assert response.status == Ask.Response.STATUS_OK, response.message
    user = llm.seen[0][1]
    images = [p for p in user.content if isinstance(p, ImagePart)]
    assert [p.url for p in images] == [f"data:image/png;base64,{base64.b64encode(data).decode()}"]
    texts = [p for p in user.content if isinstance(p, str)]
    assert texts[-2] == "mug.reference_image:" and texts[-1].startswith("## Request\nWhich one is my mug?")


def test_a_text_only_model_reads_the_images_description_instead(ros, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from carryon_interfaces.msg import MemoryFact
    from carryon_interfaces.srv import UpdateUser

    llm = start_with(ros, tmp_path, [json.dumps({"reply": "Your mug is the blue one."})], llm_images=True)
    remember_mug()
    with RosSession("planner_client") as session:  # what the user told about it
        fact = MemoryFact(entity="mug", key="colour", value="blue with a white handle", durable=True, source="pytest")
        request = UpdateUser.Request(user_id="alice", facts=[fact], source="pytest")
        written = session.call(UpdateUser, "/carryon/memory/update_user", request, timeout_s=10.0, resend_s=2.0)
        assert written.status == UpdateUser.Response.STATUS_OK, written.message
    response = ask("Which one is my mug?", plan_only=True)  # llm_backend local (default): text-only
    assert response.status == Ask.Response.STATUS_OK, response.message
    prompt = llm.seen[0][1].content
    assert isinstance(prompt, str)  # no image parts
    assert "## Reference images (not shown to you" in prompt
    assert "- mug.reference_image: colour: blue with a white handle" in prompt


def test_the_local_model_server_is_warmed_with_the_rules_and_schema_at_start(ros, wait_until, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from carryon_sim.harness.fakes.openai_server import StubVlmServer

    with StubVlmServer(default={"reply": "ok"}) as stub:
        overrides = [Parameter("llm_backend", value="local"), Parameter("llm_local_url", value=stub.base_url)]
        ros.add(PlannerNode(namespace="carryon", context=ros.context, parameter_overrides=overrides))
        assert wait_until(lambda: len(stub.requests) >= 1, 10.0)
        first = stub.requests[0].body
        assert first["max_tokens"] == 1 and first["messages"][-1]["content"] == "(warm-up: answer {})"
        assert "Plan schema (JSON Schema)" in first["messages"][0]["content"]  # what every plan request starts with
        assert '"title":"StepPlan"' in first["messages"][0]["content"]  # plan_format auto: steps for the local model


def test_an_assist_cut_by_the_shutdown_ends_quietly(ros, tmp_path: Path, capfd) -> None:  # type: ignore[no-untyped-def]
    """Ctrl-C / SIGTERM while an Assist runs: its next publish fails on the dead context and
    the goal handle is gone too. The goal ends CANCELLED with one line, no traceback (the
    handle's abort raised again before, and both errors were logged as a failure)."""
    start(ros, tmp_path, [])
    node = next(n for n in ros.nodes if isinstance(n, PlannerNode))

    class Handle:
        request = Assist.Goal(user_id="alice", text="Serve me food")

        def abort(self) -> None:
            raise AssertionError("abort on a dead context")

    def cut(goal_handle, result):  # type: ignore[no-untyped-def]
        ros.context.try_shutdown()
        raise RuntimeError("Failed to publish: the context is invalid")

    node._assist_goal = cut
    result = node._on_assist(Handle())
    assert result.status == Assist.Result.STATUS_CANCELLED and result.message == "the planner shut down"
    out = capfd.readouterr()
    assert "ended by the shutdown" in out.out and "Traceback" not in out.out + out.err
    assert not node._busy.locked()
