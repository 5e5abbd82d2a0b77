"""The figures of a link drop, from the robot side's timelines."""

from __future__ import annotations

import pytest

from carryon_bringup.core.link_drop import REJECTED_STALE, figures


def test_a_drop_read_from_the_timelines() -> None:
    # The tool moves 1 cm/s until 10.5 s, then holds; the link is down from 10 to 12 s.
    poses = [[t / 10, 0.01 * min(t / 10, 10.5), 0.0, 0.5] for t in range(90, 140)]
    timelines = {
        "released": [[9.6, 1], [9.9, 2], [12.4, 3], [12.8, 4]],
        "decisions": [[12.3, REJECTED_STALE, 0, "stale"], [12.4, 0, 8, ""], [25.0, REJECTED_STALE, 0, "later"]],
        "poses": poses,
    }
    found = figures(timelines, down_at=10.0, up_at=12.0)
    assert found.drop_s == 2.0
    assert found.last_release_s == pytest.approx(0.1) and found.moving_at_drop
    assert found.hold_s == pytest.approx(0.3)  # the last pose more than 1 mm from where it held: 10.3 s
    assert found.refused_stale == 1  # only within AFTER_S of the restore
    assert found.resume_s == pytest.approx(0.4)


def test_a_drop_with_nothing_running_says_so() -> None:
    found = figures({"released": [], "decisions": [], "poses": []}, down_at=10.0, up_at=12.0)
    assert found.last_release_s is None and found.hold_s is None and found.resume_s is None
    assert not found.moving_at_drop
    assert found.refused_stale == 0
