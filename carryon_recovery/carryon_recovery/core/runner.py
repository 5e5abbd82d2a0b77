"""One Recover request from goal to result, around the base skill (core/base_skill.py).

The skill named by the goal (default `default_skill`) is loaded from the versioned
library at the goal's version (0 = newest); a missing skill or version aborts. The
robot's measured tool position is the pre-failure pose of the fallback; without robot
state the request aborts. The base skill then runs one attempt (its own retries with
renewed perception and its fallback are the skill version's strategy); the attempt's
record goes to `record` (the input of reflection). An emergency stop seen during the run
turns any outcome into ABORTED.

The robot is injected (`make_io`, built only once the skill is loaded), so the same
rules run in recovery_node and over the in-process simulator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from carryon_common.core.errors import CarryOnError
from carryon_recovery.core.base_skill import RecoveryIO, run_base_skill
from carryon_recovery.core.library import SkillLibrary
from carryon_recovery.core.look import LOOK_SKILL
from carryon_recovery.core.reflection import Attempt
from carryon_recovery.core.types import Outcome, RecoveryResult


class CountingIO(RecoveryIO, Protocol):
    """A RecoveryIO that counts what it sent and sees the emergency stop."""

    @property
    def estopped(self) -> bool: ...

    @property
    def steps(self) -> int: ...

    @property
    def chunks_sent(self) -> int: ...

    @property
    def chunks_blocked(self) -> int: ...


@dataclass(frozen=True)
class RecoveryRequest:
    """A Recover goal: the failed subtask, the skill ("" = default) and version (0 = newest)."""

    subtask_id: str
    target: str
    destination: str
    instruction: str
    failure_reason: str = ""
    skill: str = ""
    version: int = 0


Look = Callable[[RecoveryIO, str], tuple[Outcome, str]]


def recover(
    library: SkillLibrary,
    request: RecoveryRequest,
    make_io: Callable[[], CountingIO],
    *,
    default_skill: str,
    new_attempt_id: Callable[[], str],
    cancelled: Callable[[], bool] = lambda: False,
    on_phase: Callable[[str], None] = lambda _phase: None,
    record: Callable[[Attempt], None] = lambda _attempt: None,
    log: Callable[[str], None] = lambda _line: None,
    look: Look | None = None,
) -> RecoveryResult:
    """Run one recovery (see the module docstring); never raises for a failed step.
    `new_attempt_id` is asked once the skill is loaded; `on_phase` gets each phase.
    Skill `look` is no library skill: `look(io, request.target)` moves the wrist camera
    over the named location (core/look.py); ABORTED when there is no `look`."""
    skill = request.skill or default_skill
    if skill == LOOK_SKILL:
        return _look(request, make_io, look, on_phase, log)
    try:
        version = library.load(skill, request.version or None)
    except CarryOnError as exc:
        return RecoveryResult(Outcome.ABORTED, f"skill library: {exc}", 0, skill, request.version)
    attempt_id = new_attempt_id()
    io = make_io()
    try:
        pre_failure = io.tool_position()
    except CarryOnError as exc:
        return RecoveryResult(Outcome.ABORTED, f"no robot state: {exc}", 0, skill, version.version)
    log(
        f"recovering {request.subtask_id} ({request.target} -> {request.destination or '-'}) with {skill} "
        f"v{version.version}: {request.failure_reason}"
    )
    run = run_base_skill(
        version,
        io,
        target=request.target,
        destination=request.destination,
        instruction=request.instruction,
        pre_failure=pre_failure,
        attempt_id=attempt_id,
        cancelled=cancelled,
        on_phase=on_phase,
    )
    record(run.attempt)
    outcome = Outcome.ABORTED if io.estopped else run.outcome
    message = ("emergency stop: " if io.estopped else "") + (
        f"{run.message} ({io.steps} steps, {io.chunks_sent} chunks, "
        f"{io.chunks_blocked} not released whole by the shield)"
    )
    return RecoveryResult(outcome, message, io.steps, skill, version.version)


def _look(
    request: RecoveryRequest,
    make_io: Callable[[], CountingIO],
    look: Look | None,
    on_phase: Callable[[str], None],
    log: Callable[[str], None],
) -> RecoveryResult:
    if look is None:
        return RecoveryResult(Outcome.ABORTED, "no look motion on this robot", 0, LOOK_SKILL, 0)
    io = make_io()
    log(f"looking at {request.target} for {request.subtask_id}")
    on_phase("look")
    outcome, message = look(io, request.target)
    if io.estopped:
        outcome, message = Outcome.ABORTED, f"emergency stop: {message}"
    return RecoveryResult(outcome, f"{message} ({io.steps} steps)", io.steps, LOOK_SKILL, 0)
