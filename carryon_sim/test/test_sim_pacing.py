"""Pacing: real time when the machine keeps up; after a stall sim time waits, no burst."""

from __future__ import annotations

import numpy as np
import pytest

from carryon_sim.core.pacing import Pacer


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
