"""Which joint states arm_adapter_node believes (issue 43: a forged joint state moved the arm).

Everything the adapter does with the arm's position — holds, IK seeds, the joint-jump check of
a step, the joint_states / ee_pose it publishes, a tool camera's pose — uses only measurements
this gate accepted. A measurement is accepted when it is physically possible after the last
accepted one: every value finite, every joint within the URDF's limits (± `tolerance_rad`), and
no joint moved further than `max_speed_rad_s` × the time between the two + `tolerance_rad`.

The time the arm had to move is the time since the previous message on the topic, accepted
or not, by receipt time (the arm can move that far unobserved, and no further), and no more
than the stamps say passed since the last accepted one (the controller's instants of
measurement; only when both carry one). So a continuous stream of jumped measurements, a
forger's beside the genuine one or alone after it stopped, never accumulates an allowance:
each gets 10 ms worth at 100 Hz, however long ago the last accepted one was, while a real
silence of the stream (a driver restarting, a starved adapter) allows what the arm can do
in it. (Which is also all a source gets that waits out a silence of the genuine stream.)
Stamps far apart buy no allowance either, since the receipt time bounds them.
Delivery jitter that shortens either one is what the tolerance is for. The time is capped
at `max_gap_s` (the adapter's state_timeout_s): after a longer silence the state was stale,
and the allowance stops growing.

A refused measurement changes nothing: the next one is compared with the last accepted one
again, so an interleaved stream from a second publisher stays refused message by message
while the genuine one keeps being accepted. When only jumped measurements arrive, no
accepted one is newer than state_timeout_s, the state goes stale, and the adapter's stale
path applies: nothing more is sent and chunks are refused.

Decisions, each failing closed:

* **The first position after start** needs `anchor_count` consecutive measurements that
  agree with each other (each within reach of the one before). One stray message is not a
  position, and two interleaved sources that disagree never give one.
* **No re-anchoring by default** (`reanchor_count` 0). An arm jogged by an operator while
  the adapter idles moves within the speed limit and is followed measurement by measurement;
  a stream that jumped and then stays consistent is either the arm moved while its joint
  states were not coming (the driver off or restarting while the adapter ran), or a
  source claiming a place the arm is not at (a second driver, a GUI slider, a replaced
  driver). The joint states alone cannot tell these apart. Taking the
  claim as true moves the arm as soon as anything commands relative to it: a hold, the
  first step of a chunk, or the shield planning from ee_pose. Refusing costs a restart of
  the adapter after the arm was moved by hand; accepting a forgery can cost a collision.
  With `reanchor_count` > 0 the new place is taken after that many consecutive, mutually
  consistent refused measurements. This happens only while no chunk executes and no extra
  publisher is on the topic (the caller says so with `may_reanchor`). The executor then
  forgets its last command: going back to it would move the arm by the jump.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class RobotState:
    """Measured joints (radians, in the configured order), gripper width (m, NaN = unknown),
    receipt time `stamp_s` on the node clock (s; staleness is judged on it) and the
    controller's stamp `measured_s` (s, None when the message carried none)."""

    q: FloatArray
    gripper_width_m: float
    stamp_s: float
    measured_s: float | None = None


class StateStatus(enum.Enum):
    ACCEPTED = "accepted"  # within reach of the last accepted measurement
    ANCHORED = "anchored"  # a position taken without one: the first after start, or a re-anchor
    PENDING = "pending"  # consistent so far, not yet enough of them to take the first position
    REFUSED = "refused"  # not used for anything; `reason` says why


@dataclass(frozen=True)
class StateVerdict:
    """What became of one measurement; for a refused jump, the joint that moved furthest
    beyond its allowance, how far it moved (rad) and the allowance (rad)."""

    status: StateStatus
    reason: str = ""
    joint: str = ""
    jump_rad: float = 0.0
    limit_rad: float = 0.0

    @property
    def used(self) -> bool:
        return self.status in (StateStatus.ACCEPTED, StateStatus.ANCHORED)


@dataclass(frozen=True)
class JointStateLimits:
    """Joint names and URDF position limits (rad, in the configured order); the rest as in
    ArmAdapterConfig (max_joint_speed_rad_s, joint_state_tolerance_rad, state_timeout_s,
    joint_state_anchor_count, joint_state_reanchor_count)."""

    names: tuple[str, ...]
    lower: FloatArray
    upper: FloatArray
    max_speed_rad_s: float
    tolerance_rad: float
    max_gap_s: float
    anchor_count: int
    reanchor_count: int


def elapsed_s(before: RobotState, after: RobotState, previous_receipt_s: float, cap_s: float) -> float:
    """Seconds the arm had to move from `before` to `after`: the receipt time since the
    previous message on the topic (`previous_receipt_s`, any message), at most the stamp
    difference of the two, in [0, cap_s]."""
    dt = after.stamp_s - max(before.stamp_s, previous_receipt_s)
    if before.measured_s is not None and after.measured_s is not None:
        dt = min(dt, after.measured_s - before.measured_s)
    return min(max(dt, 0.0), cap_s)


class JointStateGate:
    """Accepts or refuses each measurement (module docstring); `accepted` is the newest one
    accepted, `refused` counts refusals since start."""

    def __init__(self, limits: JointStateLimits) -> None:
        self.limits = limits
        self.accepted: RobotState | None = None
        self.refused = 0
        self._candidate: RobotState | None = None  # the last of a run of mutually consistent measurements
        self._run = 0  # how many there are in that run
        self._received_s = -math.inf  # receipt time of the previous measurement, accepted or not

    def check(self, state: RobotState, *, may_reanchor: bool = False) -> StateVerdict:
        """Accept or refuse one measurement; `may_reanchor`: the caller sees no reason against
        taking a jumped stream's new place (no chunk executes, one publisher)."""
        try:
            return self._check(state, may_reanchor)
        finally:
            self._received_s = max(self._received_s, state.stamp_s)

    def _check(self, state: RobotState, may_reanchor: bool) -> StateVerdict:
        invalid = self._invalid(state)
        if invalid is not None:
            self._candidate, self._run = None, 0
            return self._refuse(invalid)
        if self.accepted is None:
            return self._anchor(state)
        jump = self.jump(self.accepted, state)
        if jump is None:
            self.accepted, self._candidate, self._run = state, None, 0
            return StateVerdict(StateStatus.ACCEPTED)
        if self.limits.reanchor_count > 0 and may_reanchor:
            self._extend_run(state)
            if self._run >= self.limits.reanchor_count:
                return self._take(state, f"re-anchored after {self._run} consistent joint states ({jump.reason})")
        else:
            self._candidate, self._run = None, 0
        return self._refuse(jump)

    def jump(self, before: RobotState, after: RobotState) -> StateVerdict | None:
        """The refusal when `after` lies beyond what the arm can move from `before`, else None."""
        lim = self.limits
        dt = elapsed_s(before, after, self._received_s, lim.max_gap_s)
        allowance = lim.max_speed_rad_s * dt + lim.tolerance_rad
        moved = np.abs(after.q - before.q)
        worst = int(np.argmax(moved))
        if moved[worst] <= allowance:
            return None
        name = lim.names[worst]
        reason = (
            f"{name} moved {moved[worst]:.3f} rad in {dt:.3f} s (limit {allowance:.3f} rad: "
            f"{lim.max_speed_rad_s} rad/s + {lim.tolerance_rad} rad)"
        )
        return StateVerdict(StateStatus.REFUSED, reason, name, float(moved[worst]), allowance)

    def _invalid(self, state: RobotState) -> StateVerdict | None:
        lim = self.limits
        if state.q.shape != (len(lim.names),):
            return StateVerdict(StateStatus.REFUSED, f"{state.q.shape} positions for {len(lim.names)} joints")
        for i, name in enumerate(lim.names):
            value = float(state.q[i])
            if not math.isfinite(value):
                return StateVerdict(StateStatus.REFUSED, f"{name} is {value}", name)
            low, high = lim.lower[i] - lim.tolerance_rad, lim.upper[i] + lim.tolerance_rad
            if not low <= value <= high:
                outside = low - value if value < low else value - high
                limits = f"[{lim.lower[i]:.3f}, {lim.upper[i]:.3f}]"
                reason = f"{name} at {value:.3f} rad is outside its URDF limits {limits}"
                return StateVerdict(StateStatus.REFUSED, reason, name, outside, lim.tolerance_rad)
        return None

    def _anchor(self, state: RobotState) -> StateVerdict:
        previous = self._candidate
        disagrees = None if previous is None else self.jump(previous, state)
        self._extend_run(state)
        if self._run >= self.limits.anchor_count:
            return self._take(state, f"first position from {self._run} consistent joint states")
        if disagrees is not None:
            reason = f"no position taken yet: joint states disagree with each other ({disagrees.reason})"
            return self._refuse(
                StateVerdict(StateStatus.REFUSED, reason, disagrees.joint, disagrees.jump_rad, disagrees.limit_rad)
            )
        return StateVerdict(StateStatus.PENDING, f"{self._run} of {self.limits.anchor_count} consistent joint states")

    def _extend_run(self, state: RobotState) -> None:
        """Count `state` into the run of consistent measurements, or start a new run with it."""
        consistent = self._candidate is not None and self.jump(self._candidate, state) is None
        self._run = self._run + 1 if consistent else 1
        self._candidate = state

    def _take(self, state: RobotState, reason: str) -> StateVerdict:
        self.accepted, self._candidate, self._run = state, None, 0
        return StateVerdict(StateStatus.ANCHORED, reason)

    def _refuse(self, verdict: StateVerdict) -> StateVerdict:
        self.refused += 1
        return verdict
