"""Which messages belong to one instant: a camera's colour, depth and pose, and the joint
states the self-filter poses the robot with.

Each stream arrives on its own and at its own rate, so "the latest of each" mixes
instants. While the arm moves that is wrong geometry: a wrist camera's depth placed with a
pose from another instant lands the table beside itself, and a robot posed from joint
states newer than the image is filtered where it is no longer, leaving pieces of the arm
as objects. Perception therefore takes, per camera, the newest depth image whose colour
image and pose carry the same stamp (within `tolerance_s`; a driver stamps aligned colour
and depth alike, the pose is published at the depth's stamp), and the joint states nearest
to that stamp (the way message_filters' approximate-time policy and tf2 lookups at an
image's stamp do it in C++ ROS nodes).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


class StampedQueue(Generic[T]):
    """The last `size` messages of one stream with their stamps (seconds), oldest first."""

    def __init__(self, size: int, items: Iterable[tuple[float, T]] = ()) -> None:
        self._items: deque[tuple[float, T]] = deque(items, maxlen=size)

    def copy(self) -> StampedQueue[T]:
        return StampedQueue(self._items.maxlen or len(self._items), self._items)

    def add(self, stamp_s: float, item: T) -> None:
        self._items.append((stamp_s, item))

    def items(self) -> list[tuple[float, T]]:
        return list(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def latest(self) -> tuple[float, T] | None:
        return self._items[-1] if self._items else None

    def nearest(self, stamp_s: float) -> tuple[float, T] | None:
        """The item whose stamp is nearest to `stamp_s` (None when empty)."""
        return min(self._items, key=lambda entry: abs(entry[0] - stamp_s), default=None)


@dataclass(frozen=True)
class Synced(Generic[T]):
    """One camera's messages of one instant: `stamp_s` is the depth image's stamp."""

    stamp_s: float
    messages: dict[str, T]


def match(
    depths: Iterable[tuple[float, T]], others: Mapping[str, StampedQueue[T]], tolerance_s: float
) -> Synced[T] | str:
    """The newest depth with a message of every other stream within `tolerance_s` of its
    stamp; otherwise why not (a sentence naming the streams that never matched)."""
    candidates = sorted(depths, key=lambda entry: entry[0], reverse=True)
    if not candidates:
        return "no depth received"
    unmatched: set[str] = set()
    for stamp, depth in candidates:
        found: dict[str, T] = {"depth": depth}
        for stream, queue in others.items():
            nearest = queue.nearest(stamp)
            if nearest is None or abs(nearest[0] - stamp) > tolerance_s:
                unmatched.add(stream)
                break
            found[stream] = nearest[1]
        else:
            return Synced(stamp, found)
    names = ", ".join(sorted(unmatched))
    return f"no {names} stamped within {tolerance_s * 1000:.0f} ms of any of the last {len(candidates)} depth images"
