"""core/sync.py: the messages of one instant (a camera's depth, colour and pose; the
joint states nearest to them)."""

from __future__ import annotations

from carryon_perception.core.sync import StampedQueue, Synced, match


def queue(*stamps: float, size: int = 10) -> StampedQueue[str]:
    out: StampedQueue[str] = StampedQueue(size)
    for stamp in stamps:
        out.add(stamp, f"m{stamp}")
    return out


def test_the_newest_depth_with_colour_and_pose_of_its_instant() -> None:
    depths = queue(1.0, 1.1, 1.2)
    # colour at every instant, the pose not yet for 1.2: the instant 1.1 is the newest whole one
    synced = match(depths.items(), {"color": queue(1.0, 1.1, 1.2), "pose": queue(1.0, 1.101)}, 0.02)
    assert isinstance(synced, Synced)
    assert synced.stamp_s == 1.1 and synced.messages == {"depth": "m1.1", "color": "m1.1", "pose": "m1.101"}


def test_no_instant_in_common_says_which_stream_never_matched() -> None:
    reason = match(queue(1.0, 1.1).items(), {"color": queue(1.0, 1.1), "pose": queue(1.5)}, 0.02)
    assert reason == "no pose stamped within 20 ms of any of the last 2 depth images"
    assert match([], {"color": queue(1.0)}, 0.02) == "no depth received"


def test_nearest_and_the_queue_keeps_the_last_few() -> None:
    joints = queue(1.0, 1.02, 1.04, 1.06, size=3)
    assert len(joints) == 3 and joints.items()[0][0] == 1.02  # the oldest fell out
    assert joints.nearest(1.031) == (1.04, "m1.04")
    assert joints.latest() == (1.06, "m1.06")
    assert StampedQueue[str](2).nearest(1.0) is None
    copy = joints.copy()
    joints.add(2.0, "m2.0")
    assert copy.latest() == (1.06, "m1.06")
