"""Recent camera messages, read one instant at a time.

perception_node publishes a camera's segmentation + labels a little after the depth image
they were made from (stamped like it), by when the camera has sent newer depth and pose.
Pairing the newest message of each stream would put last frame's masks on this frame's
depth: after the cover moves, its mask would label the table. So every reader of masks
keeps the last `history` messages per stream and reads the newest instant whose streams
all share one stamp (camera_info, which does not change, is simply the newest).
perception_node, which pairs a depth image with its colour image and pose, reads with a
tolerance instead (`near_instant`): a driver may stamp colour and depth a few ms apart.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

Stamp = tuple[int, int]
UNSTAMPED = frozenset({"camera_info"})  # read as the newest message, whatever its stamp
CLOCK_JUMP_BACK_S = 0.5  # a message stamped this much before the newest of its stream: the clock jumped back


def stamp_key(msg: Any) -> Stamp:
    return (int(msg.header.stamp.sec), int(msg.header.stamp.nanosec))


def _seconds(key: Stamp) -> float:
    return key[0] + key[1] * 1e-9


class CameraStreams:
    """Thread-safe store of recent messages per (camera, stream)."""

    def __init__(self, history: int = 30) -> None:
        self.history = history
        self.lock = threading.Lock()
        self._msgs: dict[tuple[str, str], collections.OrderedDict[Stamp, Any]] = {}

    def keep(self, camera: str, stream: str, msg: Any) -> None:
        with self.lock:
            kept = self._msgs.setdefault((camera, stream), collections.OrderedDict())
            key = stamp_key(msg)
            if kept and _seconds(key) < _seconds(next(reversed(kept))) - CLOCK_JUMP_BACK_S:
                # A stream's stamps only go back when the clock did (a simulator reset): what is
                # kept is from before it, and as the "newest" instant it would outrank every new one.
                kept.clear()
            kept[key] = msg
            kept.move_to_end(key)
            while len(kept) > self.history:
                kept.popitem(last=False)

    def keeper(self, camera: str, stream: str) -> Callable[[Any], None]:
        return lambda msg: self.keep(camera, stream, msg)

    def clear(self) -> None:
        with self.lock:
            self._msgs.clear()

    def newest(self, camera: str, stream: str) -> Any:
        with self.lock:
            kept = self._msgs.get((camera, stream))
            return next(reversed(kept.values())) if kept else None

    def instant(self, camera: str, streams: Iterable[str]) -> dict[str, Any]:
        """stream -> message for the newest stamp at which every stamped stream of `streams`
        has a message; the stamped streams are None when there is no such instant (never
        one stream's message with another instant's). Unstamped streams: the newest."""
        wanted = list(streams)
        stamped = [s for s in wanted if s not in UNSTAMPED]
        with self.lock:
            kept: Mapping[str, Mapping[Stamp, Any]] = {s: dict(self._msgs.get((camera, s), {})) for s in wanted}
        out: dict[str, Any] = dict.fromkeys(wanted)
        for stream in wanted:
            if stream in UNSTAMPED and kept[stream]:
                out[stream] = next(reversed(list(kept[stream].values())))
        common: set[Stamp] = set(kept[stamped[0]]) if stamped else set()
        for stream in stamped[1:]:
            common &= set(kept[stream])
        if common:
            key = max(common)
            out.update({s: kept[s][key] for s in stamped})
        return out

    def near_instant(
        self, camera: str, anchor: str, streams: Iterable[str], tolerance_s: float, until_s: float | None = None
    ) -> dict[str, Any] | str:
        """stream -> message: the newest `anchor` message (e.g. depth) for which every
        stamped stream of `streams` has one stamped within `tolerance_s` of it (the nearest),
        with the unstamped streams' newest; otherwise why not (a sentence naming the streams
        that never matched). `until_s`: anchor messages stamped later are read only when there
        is no other (a stream read elsewhere, e.g. the joint states, has not caught up with them)."""
        wanted = [s for s in streams if s != anchor]
        with self.lock:
            kept = {s: dict(self._msgs.get((camera, s), {})) for s in [anchor, *wanted]}
        if not kept[anchor]:
            return f"no {anchor} received"
        out: dict[str, Any] = {s: next(reversed(list(kept[s].values()))) for s in wanted if s in UNSTAMPED and kept[s]}
        unmatched: set[str] = set()
        keys = sorted(kept[anchor], reverse=True)
        caught_up = [k for k in keys if until_s is None or _seconds(k) <= until_s]
        for key in caught_up or keys:
            found = {anchor: kept[anchor][key]}
            for stream in (s for s in wanted if s not in UNSTAMPED):
                near = min(kept[stream], key=lambda k, t=key: abs(_seconds(k) - _seconds(t)), default=None)
                if near is None or abs(_seconds(near) - _seconds(key)) > tolerance_s:
                    unmatched.add(stream)
                    break
                found[stream] = kept[stream][near]
            else:
                return {**out, **found}
        never, within = ", ".join(sorted(unmatched)), f"{tolerance_s * 1000:.0f} ms"
        return f"no {never} stamped within {within} of any of the last {len(kept[anchor])} {anchor} images"

    def missing(self, camera: str, streams: Iterable[str]) -> list[str]:
        """The streams of `streams` never received for `camera`."""
        with self.lock:
            return [s for s in streams if not self._msgs.get((camera, s))]
