"""The messages of one instant: a camera's depth, colour and pose
(CameraStreams.near_instant), and the joint states nearest to them (carryon_common.core.stamped)."""

from __future__ import annotations

from types import SimpleNamespace

from carryon_common.camera_streams import CameraStreams
from carryon_common.core.stamped import StampedQueue


def queue(*stamps: float, size: int = 10) -> StampedQueue[str]:
    out: StampedQueue[str] = StampedQueue(size)
    for stamp in stamps:
        out.add(stamp, f"m{stamp}")
    return out


def msg(stamp: float) -> SimpleNamespace:
    """A stamped message named after its stamp."""
    sec = int(stamp)
    header = SimpleNamespace(stamp=SimpleNamespace(sec=sec, nanosec=round((stamp - sec) * 1e9)))
    return SimpleNamespace(header=header, name=f"m{stamp}")


def streams(**stamps: tuple[float, ...]) -> CameraStreams:
    out = CameraStreams()
    for stream, times in stamps.items():
        for stamp in times:
            out.keep("wrist", stream, msg(stamp))
    return out


def names(found: object) -> object:
    return found if isinstance(found, str) else {s: m.name for s, m in found.items()}  # type: ignore[attr-defined]


def test_the_newest_depth_with_colour_and_pose_of_its_instant() -> None:
    # colour at every instant, the pose not yet for 1.2: the instant 1.1 is the newest whole one
    kept = streams(depth=(1.0, 1.1, 1.2), color=(1.0, 1.1, 1.2), pose=(1.0, 1.101))
    found = kept.near_instant("wrist", "depth", ("color", "depth", "pose"), 0.02)
    assert names(found) == {"depth": "m1.1", "color": "m1.1", "pose": "m1.101"}


def test_no_instant_in_common_says_which_stream_never_matched() -> None:
    reason = streams(depth=(1.0, 1.1), color=(1.0, 1.1), pose=(1.5,)).near_instant(
        "wrist", "depth", ("color", "pose"), 0.02
    )
    assert reason == "no pose stamped within 20 ms of any of the last 2 depth images"
    assert streams(color=(1.0,)).near_instant("wrist", "depth", ("color",), 0.02) == "no depth received"


def test_nearest_and_the_queue_keeps_the_last_few() -> None:
    joints = queue(1.0, 1.02, 1.04, 1.06, size=3)
    assert len(joints) == 3 and joints.items()[0][0] == 1.02  # the oldest fell out
    assert joints.nearest(1.031) == (1.04, "m1.04")
    assert joints.items()[-1] == (1.06, "m1.06")
    assert StampedQueue[str](2).nearest(1.0) is None
    copy = joints.copy()
    joints.add(2.0, "m2.0")
    assert copy.items()[-1] == (1.06, "m1.06")


def test_an_instant_the_joint_states_have_not_reached_yet_waits() -> None:
    kept = streams(depth=(1.0, 1.1), color=(1.0, 1.1), pose=(1.0, 1.1))
    found = kept.near_instant("wrist", "depth", ("color", "pose"), 0.02, until_s=1.05)
    assert names(found) == {"depth": "m1.0", "color": "m1.0", "pose": "m1.0"}
    # joint states stopped long ago: the newest instant all the same (the caller says why it cannot use it)
    assert names(kept.near_instant("wrist", "depth", ("color", "pose"), 0.02, until_s=0.5))["depth"] == "m1.1"  # type: ignore[index]


def test_after_the_clock_jumped_back_the_new_instants_are_read_not_the_old_ones() -> None:
    """A simulator reset sets the clock back: the frames kept from before it were stamped later
    than every new one, and as the "newest" instant the shield read them (and failed closed on
    them) until the history had been pushed out, hundreds of seconds of sim time later."""
    kept = streams(depth=(205.0, 205.1, 0.2, 0.3), pose=(205.0, 205.1, 0.2, 0.3))
    assert {s: m.name for s, m in kept.instant("wrist", ("depth", "pose")).items()} == {"depth": "m0.3", "pose": "m0.3"}
    late = streams(depth=(5.0, 4.8))  # out of order by less than the tolerance: both kept
    assert late.newest("wrist", "depth").name == "m4.8" and len(late._msgs["wrist", "depth"]) == 2
