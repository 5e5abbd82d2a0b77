"""Pacing: real time when the machine keeps up; after a stall sim time waits, no burst."""

from __future__ import annotations

import numpy as np
import pytest

from carryon_sim.core.pacing import Pacer, physics_slices


def starts(pacer: Pacer, costs: list[float]) -> np.ndarray:
    """Wall times at which the steps start when step k takes costs[k] seconds."""
    now, out = 0.0, []
    pacer.start(now)
    for cost in costs:
        out.append(now)
        now += cost
        now += pacer.wait(now)
    return np.array(out)


def test_steps_are_paced_at_the_real_time_factor() -> None:
    np.testing.assert_allclose(np.diff(starts(Pacer(0.05, 1.0), [0.01] * 10)), 0.05)
    np.testing.assert_allclose(np.diff(starts(Pacer(0.05, 2.0), [0.01] * 10)), 0.025)
    np.testing.assert_allclose(np.diff(starts(Pacer(0.05, 0.0), [0.01] * 10)), 0.01)  # as fast as possible


def test_after_a_stall_sim_time_waits_instead_of_catching_up() -> None:
    pacer = Pacer(0.05, 1.0)
    gaps = np.diff(starts(pacer, [0.01, 0.5] + [0.01] * 10))
    # The step after the stall starts at once; the rest keep the period: no back-to-back
    # steps making up the half second (which would age every sensor stream at once).
    assert gaps[1] == pytest.approx(0.5)
    np.testing.assert_allclose(gaps[2:], 0.05)
    assert pacer.slowdowns == 1 and pacer.slowed_s == pytest.approx(0.45)


def test_lateness_within_one_step_is_made_up() -> None:
    pacer = Pacer(0.05, 1.0)
    times = starts(pacer, [0.01, 0.08] + [0.01] * 6)  # one step 30 ms over its period
    np.testing.assert_allclose(times[3:], 0.05 * np.arange(3, 8))  # back on the original schedule
    assert pacer.slowdowns == 0


def test_a_slow_slice_is_made_up_within_its_control_period() -> None:
    # Five 10 ms slices per 50 ms period; the last one renders the cameras (30 ms).
    costs = ([0.001] * 4 + [0.03]) * 4
    pacer = Pacer(0.01, 1.0, slack_steps=5)
    times = starts(pacer, costs)
    np.testing.assert_allclose(np.diff(times[::5])[1:], 0.05)  # real time, period after period
    assert pacer.slowdowns == 0
    strict = Pacer(0.01, 1.0)  # without the slack each camera slice restarts the schedule: slower
    assert np.all(np.diff(starts(strict, costs)[::5]) > 0.06) and strict.slowdowns == 4


@pytest.mark.parametrize(
    ("period", "rate", "expected"),
    [
        (0.05, 100.0, [0.01] * 5),
        (0.05, 20.0, [0.05]),  # the guard at the control rate: one slice, as without it
        (0.05, 1.0, [0.05]),
        (0.05, 60.0, [0.018, 0.016, 0.016]),  # whole timesteps, as equal as they can be
        (0.004, 1000.0, [0.002, 0.002]),  # never below one timestep
    ],
)
def test_a_control_period_is_sliced_into_whole_timesteps(period: float, rate: float, expected: list[float]) -> None:
    slices = physics_slices(period, 0.002, rate)
    np.testing.assert_allclose(slices, expected)
    assert sum(slices) == pytest.approx(round(period / 0.002) * 0.002)
