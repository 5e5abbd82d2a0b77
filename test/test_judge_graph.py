"""judge_node, perception_node and sim_node as separate processes over real DDS: the
geometric judge sees the simulator's cameras through perception_node's masks (never the
simulator's own), keeps the baseline of a subtask, and calls an uncovering a success that
reveals the carrot."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from carryon_bringup.core.graph import GraphSpec
from carryon_bringup.graph_run import GraphRun
from carryon_common.calls import RosSession
from carryon_interfaces.msg import Subtask, Verdict
from carryon_interfaces.srv import Judge, SimPerturb

pytestmark = pytest.mark.graph


def judge(session: RosSession, namespace: str, subtask: Subtask) -> Judge.Response:
    request = Judge.Request(subtask=subtask, since_progress_s=0.0)
    return session.call(Judge, f"/{namespace}/judge/judge", request, timeout_s=20.0)


def test_geometric_judge_on_the_simulators_cameras(config_dir: Path, tmp_path: Path) -> None:
    spec = GraphSpec.load(config_dir)
    with GraphRun(spec, tmp_path / "run", only=["sim_node", "perception_node", "judge_node"]) as graph:
        graph.wait_ready(timeout_s=90.0)
        subtask = Subtask(id="s2", kind=Subtask.KIND_VLA, objective="the pink cover is off the carrot",
                          instruction="open the pink cover", target="pink_cover")  # fmt: skip
        with RosSession("judge_probe", domain_id=graph.domain_id) as session:
            # baseline taken at the first answer: once perception_node has published masks
            # (a node is ready before its first images have been perceived)
            for _ in range(40):
                first = judge(session, spec.namespace, subtask)
                if first.status == Judge.Response.STATUS_OK:
                    break
                time.sleep(0.5)
            assert first.status == Judge.Response.STATUS_OK, first.message
            assert first.verdict.status == Verdict.STATUS_RUNNING and first.verdict.backend == "geometric"

            perturb = SimPerturb.Request(kind=SimPerturb.Request.KIND_UNCOVER, object="pink_cover")
            done = session.call(SimPerturb, f"/{spec.namespace}/sim/perturb", perturb, timeout_s=10.0)
            assert done.status == SimPerturb.Response.STATUS_OK, done.message

            success = None
            for _ in range(30):  # the change shows once perception_node has perceived the new frames
                verdict = judge(session, spec.namespace, subtask).verdict
                if verdict.status == Verdict.STATUS_SUCCESS:
                    success = verdict
                    break
                time.sleep(0.5)
            assert success is not None, verdict.reason
            assert "carrot" in success.reason
