"""The messages of an instant: a stream's recent history by stamp, to find the one nearest
to another stream's instant.

Each stream arrives on its own and at its own rate, so "the latest of each" mixes
instants. While the arm moves that is wrong geometry: a robot posed from joint states
newer than the image is filtered where it is no longer, leaving pieces of the arm as
objects, and a tool-mounted camera placed at the tool's latest pose puts what it sees
where it is not. perception_node therefore takes, per camera, the newest depth image whose
colour image and pose carry its stamp (`carryon_common.camera_streams.CameraStreams.near_instant`)
and the joint states nearest to that stamp; arm_adapter_node places a tool-mounted camera
at the tool pose nearest to its image's stamp (the way tf2 lookups at an image's stamp do
it in C++ ROS nodes).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
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

    def nearest(self, stamp_s: float) -> tuple[float, T] | None:
        """The item whose stamp is nearest to `stamp_s` (None when empty)."""
        return min(self._items, key=lambda entry: abs(entry[0] - stamp_s), default=None)
