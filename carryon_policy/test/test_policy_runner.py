"""The chunk-brokering loop shared by policy_node and the simulation harness, with a fake
policy and a fake port (no ROS, no simulator)."""

from __future__ import annotations

import numpy as np
import pytest

from carryon_common.core.chunk import Chunk, Convention
from carryon_policy.core.policy import (
    InvalidAction,
    Observation,
    PolicyMetadata,
    PolicyOutput,
    PolicyUnavailable,
    RobotState,
)
from carryon_policy.core.runner import ChunkRunner, ChunksDropped, RunProgress
from carryon_policy.core.timing import InferenceRecord


class FakePolicy:
    """Chunks of `horizon` steps; raises the queued errors first."""

    def __init__(self, horizon: int = 16, errors: tuple[Exception, ...] = ()) -> None:
        self.horizon = horizon
        self.errors = list(errors)
        self.calls = 0

    @property
    def metadata(self) -> PolicyMetadata:
        return PolicyMetadata(backend="fake", description="fake", convention=Convention.ABSOLUTE, horizon=self.horizon)

    def reset(self, instruction: str, seed: int) -> None:
        pass

    def infer(self, observation: Observation) -> PolicyOutput:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        n = self.horizon
        return PolicyOutput(np.zeros((n, 3)), np.zeros((n, 3)), np.zeros(n), Convention.ABSOLUTE, server_infer_s=0.01)

    def close(self) -> None:
        pass


class FakePort:
    def __init__(self, stop_after: int | None = None) -> None:
        self.sent: list[tuple[Chunk, InferenceRecord]] = []
        self.advanced: list[int] = []
        self.dropped_errors: list[InvalidAction] = []
        self.skips = 0
        self.stop_after = stop_after
        self.now = 10.0

    def observe(self, steps_executed: int) -> tuple[float, Observation]:
        robot = RobotState(np.zeros(3), np.eye(3), np.zeros(7), 0.04)
        return self.now, Observation(len(self.sent) + 100, self.now - 0.02, robot, steps_executed=steps_executed)

    def send(self, chunk: Chunk, record: InferenceRecord) -> None:
        self.sent.append((chunk, record))

    def dropped(self, error: InvalidAction) -> None:
        self.dropped_errors.append(error)

    def skip(self) -> None:
        self.skips += 1

    def advance(self, steps: int, progress: RunProgress) -> bool:
        self.advanced.append(steps)
        self.now += steps * 0.05
        return self.stop_after is not None and len(self.advanced) >= self.stop_after


def runner(policy: FakePolicy, **kw: object) -> ChunkRunner:
    return ChunkRunner(policy, dt=0.05, steps_per_inference=8, subtask_id="s1", **kw)  # type: ignore[arg-type]


def test_runs_the_budget_in_chunks_stamped_with_their_observation() -> None:
    port = FakePort()
    progress = runner(FakePolicy(), horizon=10).run(port, budget=20)
    assert (progress.steps_executed, progress.chunks_sent) == (20, 3)
    assert port.advanced == [8, 8, 4]  # the last chunk runs only what is left of the budget
    chunk, record = port.sent[0]
    assert len(chunk) == 10 and chunk.chunk_id == 1 and chunk.subtask_id == "s1" and chunk.dt == 0.05
    assert chunk.observation_id == 100 and chunk.observation_stamp_s == pytest.approx(9.98)
    assert (
        record.backend == "fake" and record.observation_age_s == pytest.approx(0.02) and record.server_infer_s == 0.01
    )


def test_a_short_chunk_is_followed_sooner_and_the_port_can_stop_the_run() -> None:
    port = FakePort(stop_after=2)
    progress = runner(FakePolicy(horizon=5)).run(port, budget=100)
    assert port.advanced == [5, 5] and progress.steps_executed == 10 and progress.chunks_sent == 2


def test_invalid_outputs_are_dropped_and_too_many_in_a_row_end_the_run() -> None:
    def check(out: PolicyOutput, observation: Observation) -> None:
        raise InvalidAction("NaN")

    port = FakePort()
    with pytest.raises(ChunksDropped, match="3 chunks in a row dropped; last: NaN"):
        runner(FakePolicy(), check=check).run(port, budget=100)
    assert len(port.dropped_errors) == 3 and port.skips == 2 and not port.sent


def test_a_backend_invalid_action_counts_as_dropped_and_a_good_chunk_resets_the_count() -> None:
    port = FakePort()
    policy = FakePolicy(errors=(InvalidAction("bad"), InvalidAction("bad")))
    progress = runner(policy, max_dropped_in_a_row=3).run(port, budget=16)
    assert len(port.dropped_errors) == 2 and progress.chunks_sent == 2 and progress.steps_executed == 16


def test_other_backend_errors_propagate() -> None:
    with pytest.raises(PolicyUnavailable):
        runner(FakePolicy(errors=(PolicyUnavailable("server down"),))).run(FakePort(), budget=16)
