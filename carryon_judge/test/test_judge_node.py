"""judge_node in-process with an injected judge and fake cameras."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from rclpy.parameter import Parameter
from sensor_msgs.msg import Image

from carryon_common.node import latched_qos
from carryon_interfaces.msg import PlanState, Subtask, SubtaskState, Verdict
from carryon_interfaces.srv import Judge as JudgeSrv
from carryon_judge.core.geometry import ShapeTable
from carryon_judge.core.types import JudgeRequest, JudgeVerdict, VerdictStatus
from carryon_judge.node import JudgeNode


@dataclass
class FakeJudge:
    requests: list[JudgeRequest] = field(default_factory=list)

    @property
    def name(self) -> str:
        return "vlm"  # needs only colour images

    def judge(self, request: JudgeRequest) -> JudgeVerdict:
        self.requests.append(request)
        return JudgeVerdict(request.subtask.id, VerdictStatus.RUNNING, "fake", self.name, observation_id=7)


class Camera:
    def __init__(self, peer) -> None:  # type: ignore[no-untyped-def]
        self.peer, self.running = peer, True
        self.pub = peer.create_publisher(Image, "camera/scene/color", 10)
        peer.create_timer(0.05, self.publish)

    def publish(self) -> None:
        if not self.running:
            return
        msg = Image(height=4, width=6, encoding="rgb8", step=18, data=np.zeros(72, np.uint8).tobytes())
        msg.header.stamp = self.peer.get_clock().now().to_msg()
        self.pub.publish(msg)


def start(ros, **params):  # type: ignore[no-untyped-def]
    judge = FakeJudge()
    overrides = [Parameter(k, value=v) for k, v in {"cameras": ["scene"], "period_s": 0.1, **params}.items()]
    node = JudgeNode(judge, ShapeTable({}, "test"), namespace="carryon", context=ros.context,
                     parameter_overrides=overrides)  # fmt: skip
    ros.add(node)
    peer = ros.peer("fake_peers")
    return judge, peer


def call(peer, request: JudgeSrv.Request, wait_until) -> JudgeSrv.Response:  # type: ignore[no-untyped-def]
    client = peer.create_client(JudgeSrv, "judge/judge")
    assert client.wait_for_service(timeout_sec=10.0)
    future = client.call_async(request)
    assert wait_until(future.done, 10.0)
    return future.result()


def subtask(sid: str = "s1") -> Subtask:
    return Subtask(id=sid, kind="vla", objective="carrot in bowl", instruction="put the carrot in the bowl",
                   target="carrot", destination="bowl")  # fmt: skip


def test_one_shot_service_keeps_the_baseline_and_passes_the_callers_progress(ros, wait_until) -> None:  # type: ignore[no-untyped-def]
    judge, peer = start(ros, monitor=False)
    camera = Camera(peer)
    assert wait_until(lambda: camera.running, 1.0)
    request = JudgeSrv.Request(subtask=subtask(), completed_subtask_ids=["s0"], since_progress_s=3.5)
    assert wait_until(lambda: call(peer, request, wait_until).status == JudgeSrv.Response.STATUS_OK, 10.0)
    response = call(peer, request, wait_until)
    assert response.verdict.status == Verdict.STATUS_RUNNING and response.verdict.backend == "vlm"
    first, last = judge.requests[0], judge.requests[-1]
    assert last.baseline is first.baseline and last.current is not first.current
    assert last.since_progress_s == 3.5 and [s.id for s in last.completed] == ["s0"]
    assert last.subtask.objective == "carrot in bowl"


def test_missing_or_stale_images_give_an_unable_verdict_with_the_reason(ros, wait_until) -> None:  # type: ignore[no-untyped-def]
    judge, peer = start(ros, monitor=False, max_image_age_s=0.3)
    response = call(peer, JudgeSrv.Request(subtask=subtask()), wait_until)
    assert response.status == JudgeSrv.Response.STATUS_UNAVAILABLE
    assert response.verdict.status == Verdict.STATUS_UNABLE_TO_JUDGE and "no color" in response.verdict.reason
    camera = Camera(peer)
    assert wait_until(lambda: call(peer, JudgeSrv.Request(subtask=subtask()), wait_until).status == 0, 10.0)
    camera.running = False
    stale = lambda: "stale" in call(peer, JudgeSrv.Request(subtask=subtask()), wait_until).verdict.reason  # noqa: E731
    assert wait_until(stale, 10.0)
    assert judge.requests  # judged while fresh


def test_monitor_follows_the_active_subtask_of_plan_state(ros, wait_until) -> None:  # type: ignore[no-untyped-def]
    judge, peer = start(ros)
    Camera(peer)
    verdicts: list[Verdict] = []
    peer.create_subscription(Verdict, "judge/verdict", verdicts.append, 10)
    plans = peer.create_publisher(PlanState, "planner/plan_state", latched_qos(10))
    done = SubtaskState(subtask=subtask("s0"), state=SubtaskState.STATE_SUCCEEDED)
    active = SubtaskState(subtask=subtask("s1"), state=SubtaskState.STATE_ACTIVE)
    plans.publish(PlanState(state=PlanState.STATE_EXECUTING, subtasks=[done, active], active_subtask_id="s1"))
    assert wait_until(lambda: sum(v.subtask_id == "s1" and v.status == 0 for v in verdicts) >= 3, 10.0)
    monitored = [r for r in judge.requests if r.subtask.id == "s1"]
    assert all(r.baseline is monitored[0].baseline for r in monitored)
    assert [s.id for s in monitored[-1].completed] == ["s0"]
    plans.publish(PlanState(state=PlanState.STATE_SUCCEEDED, subtasks=[done], active_subtask_id=""))
    assert wait_until(lambda: judge.requests and len(judge.requests) == len(judge.requests), 0.5)
    count = len(verdicts)
    import time

    time.sleep(0.5)
    assert len(verdicts) <= count + 1  # at most one in flight when it stopped
