"""`carryon bench recovery`: the perturbations fire, an episode runs end to end, and the
rounds harness re-runs only failed episodes, reflects between rounds (stub LLM over HTTP)
and reports cumulative completion."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from carryon_bench import recovery
from carryon_bench.core.bench import BenchOptions, BenchResult
from carryon_recovery.core.library import SkillVersion
from carryon_recovery.core.reflection import Attempt, Operation
from carryon_sim.harness.fakes.openai_server import StubVlmServer
from carryon_sim.harness.fakes.openpi_server import FakeOpenpiServer

CONFIG = Path(__file__).resolve().parents[2] / "config"


def test_a_drop_episode_runs_with_and_without_the_base_skill() -> None:
    done, attempts = recovery.run_episode(recovery.Episode("drop", 1), None)
    assert not done and attempts == []  # seed 1: the VLA alone does not finish after the drop
    version = recovery.SkillLibrary(CONFIG / "skills" / "recovery").load("regrasp")
    done, attempts = recovery.run_episode(recovery.Episode("drop", 1), version)
    assert attempts and attempts[0].operations[0].op == "relocalize"
    assert all(a.task_completed == done for a in attempts)  # attempts carry the episode's ground-truth outcome


def test_a_natural_episode_serves_the_policy_pixels_and_state_and_no_ground_truth() -> None:
    """--natural: the learned policy (here a fake server that holds the tool where it is)
    gets both cameras at its input size and its 10-value state over openpi's protocol,
    until the geometric judge (on perception's masks) finds it stuck, three times."""
    from carryon_sim.harness.learned import layout

    def hold(request: dict[str, object]) -> np.ndarray:
        state = np.asarray(request[layout.STATE_KEY], dtype=np.float32)
        chunk = np.tile(state, (16, 1))
        chunk[:, -1] = 0.0  # gripper open
        return chunk

    with FakeOpenpiServer(answer=hold) as server:
        masks = recovery._perceived(CONFIG)
        done, attempts = recovery.run_episode(recovery.Episode(recovery.NATURAL, 5), None, masks, server.uri)
        requests = list(server.requests)
    assert not done and attempts == []
    assert len(requests) >= 3 * 160 // 8  # one per 8 steps until judged stuck (8 s) three times
    first = requests[0]
    assert set(first) == {*layout.CAMERAS, layout.STATE_KEY, "prompt"}  # pixels, state, prompt: nothing else
    for key in layout.CAMERAS:
        assert first[key].shape == (*layout.IMAGE_SIZE, 3) and first[key].dtype == np.uint8
    assert first["prompt"] == "put the carrot in the bowl"


def fake_attempt(version: SkillVersion, seed: int) -> Attempt:
    check = Operation(op="check_holding", ok=False, measured={"gripper_width_m": 0.001})
    return Attempt(attempt_id=f"e{seed}", skill="regrasp", version=version.version, target="carrot",
                   instruction="put the carrot in the bowl", outcome="fallback", task_completed=False,
                   operations=[check])  # fmt: skip


def rounds_with_a_higher_grasp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BenchResult:
    """The rounds, reflection (a stub LLM over HTTP) proposing grasp_height_m 0.02 (v2)."""
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    reply = {"decision": "UPDATE", "kind": "parameter", "parameter": "grasp_height_m", "value": 0.02,
             "diagnosis": "slipped after the lift", "evidence": ["e1: check_holding width 0.001"]}  # fmt: skip
    with StubVlmServer([json.dumps(reply)]) as stub:
        sets = ("planner_node.llm_backend=openai", f"planner_node.llm_base_url={stub.base_url}")
        return recovery.run(BenchOptions(True, 0, tmp_path / "run", sets, CONFIG))


def test_rounds_rerun_failures_and_reflect_between_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake physics: the VLA alone finishes even seeds; v1 finishes none of the rest (with the
    simulator's masks, the ablation, it finishes seed 1); v2 (a higher grasp) finishes seeds
    divisible by 3."""
    runs: list[tuple[int, int | None]] = []
    ablation: list[int] = []

    def fake_episode(
        episode: recovery.Episode, version: SkillVersion | None, masks: object = None, policy_uri: str = ""
    ) -> tuple[bool, list[Attempt]]:
        if version is not None and masks is None:  # R1_sim_truth: the ablation with the simulator's masks
            ablation.append(episode.seed)
            return episode.seed == 1, []
        runs.append((episode.seed, None if version is None else version.version))
        if version is None:
            return episode.seed % 2 == 0, []
        done = version.version == 2 and episode.seed % 3 == 0
        update = {"task_completed": done, "outcome": "resumed" if done else "fallback"}
        return done, [fake_attempt(version, episode.seed).model_copy(update=update)]

    monkeypatch.setattr(recovery, "run_episode", fake_episode)
    result = rounds_with_a_higher_grasp(tmp_path, monkeypatch)
    metrics = {m.name: m.value for m in result.metrics}
    # 8 episodes (4 drop + 4 displace, seeds 0-3): R0 finishes 0 and 2 of each kind.
    assert metrics["R0_completion"] == 50.0 and metrics["R1_completion"] == 50.0
    assert metrics["R2_completion"] == 75.0  # seed 3 of each kind, with v2
    # The ablation re-ran R1's episodes (the odd seeds) and changed no episode's state.
    assert sorted(ablation) == [1, 1, 3, 3] and metrics["R1_sim_truth_completion"] == 75.0
    assert metrics["R1_completion_delta_vs_sim_truth"] == -25.0
    assert [v for _, v in runs].count(None) == 8 and all(seed % 2 == 1 for seed, v in runs if v is not None)
    reflection = result.details["reflection"]
    assert reflection["decision"] == "UPDATE" and reflection["kept"]  # v1 re-run on v2's episodes: none
    assert reflection["evidence"] == "v2 resolved 2 of 4; parent v1: 0"
    # What was reviewed (ids unique per round and episode) and the reflector's own reply, for the chain.
    assert reflection["reviewed_attempts"] == ["R1-drop-1/e1", "R1-drop-3/e3", "R1-displace-1/e1"]
    assert json.loads(reflection["reply"])["parameter"] == "grasp_height_m"
    assert (tmp_path / "run" / "skills" / "recovery" / "regrasp" / "v2.yaml").is_file()
    assert not (CONFIG / "skills" / "recovery" / "regrasp" / "v2.yaml").exists()  # config/ untouched
    assert metrics["recovery_success_v1"] == 0.0 and metrics["recovery_success_v2"] == 50.0
    assert (tmp_path / "run" / "recovery.png").stat().st_size > 0


def test_a_written_version_no_better_than_its_parent_rerun_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent re-run on R2's episodes is the control: v2 finishes seed 3, but so does v1 on
    its second try there, so v2 is not kept, and the control changes no episode's state."""
    tries: dict[tuple[str, int], int] = {}

    def fake_episode(
        episode: recovery.Episode, version: SkillVersion | None, masks: object = None, policy_uri: str = ""
    ) -> tuple[bool, list[Attempt]]:
        if version is None or masks is None:  # R0: nothing finishes; the R1_sim_truth ablation: not counted
            return False, []
        if version.version == 1:
            tries[episode.kind, episode.seed] = tries.get((episode.kind, episode.seed), 0) + 1
        done = episode.seed == 3 and (version.version == 2 or tries[episode.kind, episode.seed] == 2)
        return done, [fake_attempt(version, episode.seed)]

    monkeypatch.setattr(recovery, "run_episode", fake_episode)
    monkeypatch.setattr(recovery, "_perceived", lambda _config_dir: object())  # masks given: not the ablation
    result = rounds_with_a_higher_grasp(tmp_path, monkeypatch)
    reflection = result.details["reflection"]
    assert reflection["written"] == 2 and not reflection["kept"]
    assert reflection["evidence"] == "v2 resolved 2 of 8; parent v1: 2"
    assert {m.name: m.value for m in result.metrics}["R2_completion"] == 25.0  # v2's, not the control's


def test_without_a_revision_r2_reuses_the_version_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NO_UPDATE writes nothing: R2 still re-runs the failed episodes, with v1 reused."""
    runs: list[tuple[str, int, int | None]] = []

    def fake_episode(
        episode: recovery.Episode, version: SkillVersion | None, masks: object = None, policy_uri: str = ""
    ) -> tuple[bool, list[Attempt]]:
        if version is not None and masks is None:  # R1_sim_truth ablation: not a try of this test's
            return False, []
        runs.append((episode.kind, episode.seed, None if version is None else version.version))
        tries = sum(1 for kind, seed, v in runs if (kind, seed) == (episode.kind, episode.seed) and v is not None)
        done = version is not None and tries == 2 and episode.seed == 1  # the second v1 try of seed 1 succeeds
        return done, [] if version is None else [fake_attempt(version, episode.seed)]

    monkeypatch.setattr(recovery, "run_episode", fake_episode)
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    reply = {"decision": "NO_UPDATE", "diagnosis": "the failures disagree", "evidence": ["e1", "e2"]}
    with StubVlmServer([json.dumps(reply)]) as stub:
        sets = ("planner_node.llm_backend=openai", f"planner_node.llm_base_url={stub.base_url}")
        result = recovery.run(BenchOptions(True, 0, tmp_path / "run", sets, CONFIG))
    metrics = {m.name: (m.value, m.note) for m in result.metrics}
    assert metrics["R1_completion"][0] == 0.0
    assert metrics["R2_completion"][0] == 25.0  # seed 1 of each kind on its second try
    assert "reused, reflection NO_UPDATE" in metrics["R2_completion"][1]
    assert [r["version"] for r in result.details["rounds"]] == [None, 1, 1]
    assert not (tmp_path / "run" / "skills" / "recovery" / "regrasp" / "v2.yaml").exists()


def test_an_interrupted_run_resumes_without_replaying(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Episodes and the reflection are saved as they finish: a resumed run plays only the rest."""
    played: list[tuple[str, int, int | None]] = []

    def fake_episode(
        episode: recovery.Episode, version: SkillVersion | None, masks: object = None, policy_uri: str = ""
    ) -> tuple[bool, list[Attempt]]:
        if version is not None and masks is None:  # R1_sim_truth ablation: not counted here
            return False, []
        played.append((episode.kind, episode.seed, None if version is None else version.version))
        if version is not None and len(played) == 11:
            raise KeyboardInterrupt  # Ctrl-C in the middle of R1
        return episode.seed == 0, [] if version is None else [fake_attempt(version, episode.seed)]

    monkeypatch.setattr(recovery, "run_episode", fake_episode)
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    reply = {"decision": "NO_UPDATE", "diagnosis": "not enough evidence", "evidence": ["e1"]}
    run_dir = tmp_path / "run"
    with StubVlmServer([json.dumps(reply)]) as stub:
        sets = ("planner_node.llm_backend=openai", f"planner_node.llm_base_url={stub.base_url}")
        with pytest.raises(KeyboardInterrupt):
            recovery.run(BenchOptions(True, 0, run_dir, sets, CONFIG))
        assert len(played) == 11  # R0: 8 episodes; R1: 2 saved, the third interrupted
        played.clear()
        result = recovery.run(BenchOptions(True, 0, run_dir, sets, CONFIG))
    assert [v for _, _, v in played].count(None) == 0  # R0 is not played again
    assert len([p for p in played if p[2] == 1]) == 4 + 6  # R1: the 4 left; R2: all 6 still failed
    assert result.details["rounds"][1]["ran"] == 6 and len(stub.requests) == 1
