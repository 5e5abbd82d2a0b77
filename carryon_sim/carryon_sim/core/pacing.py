"""Real-time pacing of the simulation loop.

Each step is due `period_s / real_time_factor` wall seconds after the previous one. When
the machine stalls and a step comes due more than one step late, the schedule restarts
from now: simulated time waits for the machine instead of racing through the missed steps
back to back, which would age every sensor stream at once before any other node could run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Pacer:
    """`start(now)` before the first step, `wait(now)` after each: seconds to sleep before
    the next one (`now` from a monotonic clock). `slowdowns` / `slowed_s`: how often and
    by how much it fell behind. The schedule restarts when more than `slack_steps` steps
    late (the slices of a control period: one slow slice, a camera frame, is made up by
    the next ones)."""

    period_s: float
    real_time_factor: float
    slack_steps: int = 1
    slowdowns: int = 0
    slowed_s: float = 0.0
    _due: float | None = field(default=None, repr=False)

    def start(self, now: float) -> None:
        """The first step starts now."""
        self._due = now

    def wait(self, now: float) -> float:
        if self.real_time_factor <= 0:
            return 0.0  # as fast as possible
        step = self.period_s / self.real_time_factor
        self._due = now + step if self._due is None else self._due + step
        late = now - self._due
        if late > step * self.slack_steps:
            self.slowdowns += 1
            self.slowed_s += late
            self._due = now
        return max(0.0, self._due - now)


def physics_slices(period_s: float, timestep_s: float, guard_rate_hz: float) -> list[float]:
    """One control period's physics as consecutive slices of whole timesteps, at least
    `guard_rate_hz` of them a second where the timestep allows, as equal as they can be:
    the driver's guard (e-stop, shield heartbeat) runs between slices, and the physics is
    the same whatever the split."""
    steps = max(1, round(period_s / timestep_s))
    count = min(steps, max(1, math.ceil(period_s * guard_rate_hz - 1e-9)))
    base, extra = divmod(steps, count)
    return [(base + (1 if i < extra else 0)) * timestep_s for i in range(count)]
