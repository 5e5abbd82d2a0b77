"""The chunk-brokering loop: ask the policy for a chunk, check it, stamp it, hand it on,
let its first steps run, repeat. One loop for policy_node (on the robot's clock, chunks
published to the shield) and the simulation harness's episodes (on the MuJoCo world,
chunks through an in-process gate), so the two cannot drift.

Where observations come from, where chunks go and how time passes is the `ChunkPort`
the caller injects.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from carryon_common.core.chunk import Chunk, ChunkSource
from carryon_policy.core.policy import InvalidAction, Observation, Policy, PolicyError, PolicyOutput
from carryon_policy.core.timing import InferenceRecord

# A check of a backend's output against the observation it came from; raises InvalidAction.
OutputCheck = Callable[[PolicyOutput, Observation], None]


class ChunksDropped(PolicyError):
    """Too many chunks in a row failed the output check; `last` is the last reason."""

    def __init__(self, count: int, last: InvalidAction) -> None:
        super().__init__(f"{count} chunks in a row dropped; last: {last}")
        self.count = count
        self.last = last


@dataclass
class RunProgress:
    """How far a run got: control steps executed, chunks handed on, last inference (s)."""

    steps_executed: int = 0
    chunks_sent: int = 0
    last_infer_s: float = 0.0


class ChunkPort(Protocol):
    """What the loop talks to. Any method may raise to end the run (a cancel, a timeout)."""

    def observe(self, steps_executed: int) -> tuple[float, Observation]:
        """The time now (seconds, the caller's clock) and a fresh observation; waits for one."""
        ...

    def send(self, chunk: Chunk, record: InferenceRecord) -> None:
        """Hand a chunk on (to the shield, or a gate and the driver) with its timing."""
        ...

    def dropped(self, error: InvalidAction) -> None:
        """A chunk failed the output check and was not sent (report it)."""
        ...

    def skip(self) -> None:
        """After a dropped chunk: let one inference period pass before observing again."""
        ...

    def advance(self, steps: int, progress: RunProgress) -> bool:
        """Let the first `steps` control steps of the chunk just sent run (`progress` is
        not yet updated for them). True: stop the run now (e.g. the task is done)."""
        ...


@dataclass
class ChunkRunner:
    """Runs `policy` (already reset to its instruction) on `port` for up to a step budget.

    dt: control period (s); steps_per_inference: steps executed per chunk (fewer when the
    chunk is shorter or the budget ends); horizon: chunks are cut to this many steps (None:
    as the backend returned them); check: the output check (None: no check);
    max_dropped_in_a_row: that many invalid outputs in a row (InvalidAction from the backend
    or the check) raise ChunksDropped; clock: times the backend call. Any other
    PolicyError from the backend (UnknownInstruction included) propagates.
    """

    policy: Policy
    dt: float
    steps_per_inference: int
    subtask_id: str = ""
    horizon: int | None = None
    check: OutputCheck | None = None
    max_dropped_in_a_row: int = 3
    clock: Callable[[], float] = time.perf_counter

    def run(self, port: ChunkPort, budget: int, progress: RunProgress | None = None) -> RunProgress:
        """Loop until `budget` steps ran or `port.advance` says stop; returns `progress`."""
        progress = progress if progress is not None else RunProgress()
        backend = self.policy.metadata.backend
        dropped_in_a_row = 0
        while progress.steps_executed < budget:
            now, observation = port.observe(progress.steps_executed)
            began = self.clock()
            try:
                out = self.policy.infer(observation)
                infer_s = self.clock() - began
                if self.check is not None:
                    self.check(out, observation)
            except InvalidAction as exc:
                dropped_in_a_row += 1
                port.dropped(exc)
                if dropped_in_a_row >= self.max_dropped_in_a_row:
                    raise ChunksDropped(dropped_in_a_row, exc) from None
                port.skip()
                continue
            dropped_in_a_row = 0
            chunk_id = progress.chunks_sent + 1
            chunk = self.chunk(out, observation, chunk_id)
            record = InferenceRecord(
                chunk_id, backend, infer_s, max(0.0, now - observation.stamp_s), out.server_infer_s
            )
            port.send(chunk, record)
            steps = min(self.steps_per_inference, len(chunk), budget - progress.steps_executed)
            progress.chunks_sent = chunk_id
            progress.last_infer_s = infer_s
            stop = port.advance(steps, progress)
            progress.steps_executed += steps
            if stop:
                break
        return progress

    def chunk(self, out: PolicyOutput, observation: Observation, chunk_id: int) -> Chunk:
        """A policy chunk carrying the id and stamp of the observation it came from."""
        return policy_chunk(
            out,
            chunk_id=chunk_id,
            subtask_id=self.subtask_id,
            dt=self.dt,
            observation_id=observation.observation_id,
            stamp_s=observation.stamp_s,
            horizon=self.horizon,
        )


def policy_chunk(
    out: PolicyOutput,
    *,
    chunk_id: int,
    subtask_id: str,
    dt: float,
    observation_id: int,
    stamp_s: float,
    horizon: int | None = None,
) -> Chunk:
    """A backend's output as a policy chunk of at most `horizon` steps (None: all), `dt`
    seconds apart, carrying the id and stamp (seconds, the caller's clock) of the
    observation it was computed from."""
    n = len(out) if horizon is None else horizon
    return Chunk(
        chunk_id=chunk_id,
        subtask_id=subtask_id,
        source=ChunkSource.POLICY,
        convention=out.convention,
        frame_id=out.frame_id,
        dt=dt,
        observation_id=observation_id,
        observation_stamp_s=stamp_s,
        positions=out.positions[:n],
        rotations=out.rotations[:n],
        gripper=out.gripper[:n],
    )
