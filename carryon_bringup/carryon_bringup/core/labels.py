"""Where to put a plot's text labels so that none covers another (objects placed on top of
each other, a carrot under its cover, share a point and would print their names over each
other). Display coordinates: pixels, y up, as matplotlib's `transData` gives them.
"""

from __future__ import annotations

from collections.abc import Sequence

Box = tuple[float, float, float, float]  # (x0, y0, x1, y1), pixels, x0 <= x1, y0 <= y1
RINGS = 12  # how far out (in label heights) a label may be pushed before giving up


def intersects(a: Box, b: Box) -> bool:
    """Whether two boxes overlap (touching edges do not)."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _candidates(size: tuple[float, float], gap: float) -> list[tuple[float, float]]:
    """Offsets of a label's lower-left corner from its anchor, nearest first: above right,
    below right, above left, below left, then the same one label height further out."""
    width, height = size
    out = []
    for ring in range(RINGS):
        lift = ring * (height + gap)
        out += [
            (gap, gap + lift),
            (gap, -gap - height - lift),
            (-gap - width, gap + lift),
            (-gap - width, -gap - height - lift),
        ]
    return out


def place_labels(
    anchors: Sequence[tuple[float, float]], sizes: Sequence[tuple[float, float]], gap: float = 3.0
) -> list[tuple[float, float]]:
    """The offset (dx, dy) of each label's lower-left corner from its anchor point (pixels),
    such that no two labels' boxes intersect: each label, in order, takes the nearest
    candidate position (see `_candidates`) that is clear of those placed before it. A label
    with no clear position within RINGS keeps the outermost one tried."""
    if len(anchors) != len(sizes):
        raise ValueError(f"{len(anchors)} anchors but {len(sizes)} sizes")
    placed: list[Box] = []
    offsets: list[tuple[float, float]] = []
    for (x, y), (width, height) in zip(anchors, sizes, strict=True):
        options = _candidates((width, height), gap)
        chosen = options[-1]
        for dx, dy in options:
            if not any(intersects((x + dx, y + dy, x + dx + width, y + dy + height), box) for box in placed):
                chosen = (dx, dy)
                break
        dx, dy = chosen
        placed.append((x + dx, y + dy, x + dx + width, y + dy + height))
        offsets.append(chosen)
    return offsets
