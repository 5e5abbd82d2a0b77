"""What the shield checks: the hand, the fingers and a carried object as spheres.

Every part is a set of spheres fixed in the tool frame (tool centre point between the
fingertips; tool z = approach direction, tool x = finger axis; the hand's boxes of the
robot model, `carryon_robot.core.hand`). Boxes are covered by a grid of spheres that each
contain one cell, so a sphere's clearance (centre distance minus radius) never overstates
the box's true clearance. A carried object's spheres come from its segmented points at grasp time,
expressed in the tool frame, so they move with the tool.

The holding latch decides when the carried object is included: it sets when the executed
gripper command is closed and the measured width stays between "closed on nothing" and
"open", and clears when the command opens or the fingers close on nothing.
"""

from __future__ import annotations

import enum
import functools
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from carryon_robot.core.hand import HAND_BOXES, OPEN_WIDTH_M, finger_boxes
from carryon_shield.core.types import FloatArray


class Part(enum.IntEnum):
    HAND = 0  # palm, flange, wrist camera
    FINGERS = 1
    CARRIED = 2


PART_NAMES = {Part.HAND: "hand", Part.FINGERS: "fingers", Part.CARRIED: "carried object"}

_CELL_M = 0.07  # coarse on purpose: exact box distances decide, spheres only find candidates


def box_spheres(lo: tuple[float, float, float], hi: tuple[float, float, float], cell_m: float = _CELL_M) -> FloatArray:
    """Spheres (S, 4) (x, y, z, r) covering the box [lo, hi]: one per grid cell, each
    containing its cell."""
    lo_a, hi_a = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    extent = hi_a - lo_a
    counts = np.maximum(1, np.ceil(extent / cell_m - 1e-9)).astype(int)
    cell = extent / counts
    axes = [lo_a[i] + cell[i] * (np.arange(counts[i]) + 0.5) for i in range(3)]
    centres = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)
    radius = 0.5 * float(np.linalg.norm(cell))
    return np.column_stack([centres, np.full(len(centres), radius)])


@dataclass(frozen=True)
class GripperGeometry:
    """The checked parts in the tool frame. spheres (S, 4) (x, y, z, r) covering every
    part; part (S,) its Part; box (S,) index into boxes (B, 2, 3) (lo, hi) of the box the
    sphere covers, -1 for carried-object spheres (which are the geometry themselves).
    Spheres find candidates fast; boxes give exact distances for them."""

    spheres: FloatArray
    part: npt.NDArray[np.int8]
    box: npt.NDArray[np.intp]
    boxes: FloatArray

    @classmethod
    def build(cls, width_m: float, carried: FloatArray | None = None) -> GripperGeometry:
        return _build(round(min(max(width_m, 0.0), OPEN_WIDTH_M), 3), carried)

    def bounding_sphere(self) -> tuple[FloatArray, float]:
        """Centre (3,) in the tool frame and radius of one sphere containing every part."""
        return self._bounding

    @functools.cached_property
    def _bounding(self) -> tuple[FloatArray, float]:
        centre = 0.5 * (self.spheres[:, :3].min(axis=0) + self.spheres[:, :3].max(axis=0))
        radius = float(np.max(np.linalg.norm(self.spheres[:, :3] - centre, axis=1) + self.spheres[:, 3]))
        return centre, radius

    @functools.cached_property
    def box_part(self) -> npt.NDArray[np.int64]:
        """The Part (B,) of every box."""
        out = np.zeros(len(self.boxes), dtype=np.int64)
        for index in range(len(self.boxes)):
            out[index] = int(self.part[np.flatnonzero(self.box == index)[0]])
        return out

    def closest_point(self, local: FloatArray) -> FloatArray:
        """The point (3,) of the parts (boxes and carried spheres) closest to `local` (3,),
        all in the tool frame."""
        candidates = [np.clip(local, lo, hi) for lo, hi in self.boxes]
        for x, y, z, r in self.spheres[self.box < 0]:
            offset = local - np.array([x, y, z])
            norm = float(np.linalg.norm(offset))
            candidates.append(local if norm <= r else np.array([x, y, z]) + offset * (r / norm))
        stacked = np.asarray(candidates)
        out: FloatArray = stacked[int(np.argmin(np.linalg.norm(stacked - local, axis=1)))]
        return out

    def has_carried(self) -> bool:
        return bool(np.any(self.part == Part.CARRIED))


@functools.lru_cache(maxsize=128)
def _fixed_parts(width_m: float) -> tuple[FloatArray, npt.NDArray[np.int8], npt.NDArray[np.intp], FloatArray]:
    boxes = [(lo, hi, Part.HAND, _CELL_M) for lo, hi in HAND_BOXES]
    boxes += [(lo, hi, Part.FINGERS, 0.03) for lo, hi in finger_boxes(width_m)]
    spheres, part, box = [], [], []
    for index, (lo, hi, which, cell) in enumerate(boxes):
        covering = box_spheres(lo, hi, cell)
        spheres.append(covering)
        part.append(np.full(len(covering), which, dtype=np.int8))
        box.append(np.full(len(covering), index, dtype=np.intp))
    table = np.array([[lo, hi] for lo, hi, _, _ in boxes], dtype=np.float64)
    return np.concatenate(spheres), np.concatenate(part), np.concatenate(box), table


def _build(width_m: float, carried: FloatArray | None) -> GripperGeometry:
    spheres, part, box, boxes = _fixed_parts(width_m)
    if carried is not None and len(carried):
        spheres = np.concatenate([spheres, carried])
        part = np.concatenate([part, np.full(len(carried), Part.CARRIED, dtype=np.int8)])
        box = np.concatenate([box, np.full(len(carried), -1, dtype=np.intp)])
    return GripperGeometry(spheres, part, box, boxes)


def inside_hand(local: FloatArray, width_m: float, margin_m: float = 0.0) -> npt.NDArray[np.bool_]:
    """Which tool-frame points (N, 3) lie inside the hand or the fingers opened to
    `width_m`, every box grown by `margin_m` (its exact boxes, not the covering spheres)."""
    boxes = _fixed_parts(round(min(max(width_m, 0.0), OPEN_WIDTH_M), 3))[3]
    inside = np.zeros(len(local), dtype=bool)
    for lo, hi in boxes:
        inside |= np.all((local >= lo - margin_m) & (local <= hi + margin_m), axis=1)
    return inside


def carried_spheres(
    target_points: FloatArray, tool_position: FloatArray, tool_rotation: FloatArray, cell_m: float
) -> FloatArray:
    """The carried object's spheres (S, 4) in the tool frame from its world points (K, 3)
    seen with the tool at (tool_position, tool_rotation): one per occupied `cell_m` cell,
    centred on the cell and containing it. Deliberately generous: what the cameras saw of a
    held object is its top and sides, and it may turn in the fingers; spheres hugging the
    seen points (1 cm, +5 mm) let a carried carrot's unseen underside hit the bottle in 5 of
    10 safety episodes."""
    if len(target_points) == 0:
        return np.zeros((0, 4))
    local = (target_points - tool_position) @ tool_rotation
    cells = np.unique(np.floor(local / cell_m).astype(np.int64), axis=0)
    centres = (cells + 0.5) * cell_m
    return np.column_stack([centres, np.full(len(centres), 0.5 * math.sqrt(3.0) * cell_m)])


def attached_to_tool(spheres: FloatArray, link_m: float, seed_m: float, min_piece: int) -> FloatArray:
    """The carried spheres (S, 4, tool frame) less small pieces not joined to what the
    fingers hold. Spheres closer than `link_m` (centre to centre) are one piece; a piece
    with a sphere within `seed_m` (plus its radius) of the tool centre point is held. A
    piece that is not held is kept when it has `min_piece` spheres or more (a part of the
    object whose link to the fingers they hide) and dropped when smaller: a few pixels of
    a neighbouring object labelled as the target (the pink cover's wall next to the carried
    carrot, 12 cm under the tool: the shield then kept the carrot from ever being lowered
    into the bowl). With no held piece seen, every sphere is kept."""
    if len(spheres) < 2:
        return spheres
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree

    pairs = cKDTree(spheres[:, :3]).query_pairs(link_m, output_type="ndarray")
    graph = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(len(spheres), len(spheres)))
    _count, piece = connected_components(graph, directed=False)
    held = np.unique(piece[np.linalg.norm(spheres[:, :3], axis=1) <= seed_m + spheres[:, 3]])
    if not len(held):
        return spheres
    sizes = np.bincount(piece)
    return spheres[np.isin(piece, held) | (sizes[piece] >= min_piece)]


class HoldingLatch:
    """Holding state from the measured gripper width and the executed gripper command.

    Sets when the command is closed (>= 0.5) and the width lies in (min_width, max_width)
    (something keeps the fingers apart); clears when the command opens or the fingers
    close on nothing (width <= min_width: the object slipped out). While the fingers are
    still closing (width above max_width) the previous state holds."""

    def __init__(self, min_width_m: float, max_width_m: float) -> None:
        self.min_width_m = min_width_m
        self.max_width_m = max_width_m
        self.holding = False
        self.carried: FloatArray = np.zeros((0, 4))

    def update(self, width_m: float, command: float) -> tuple[bool, bool]:
        """Feed one measurement; returns (holding, just_grasped)."""
        was = self.holding
        if command < 0.5 or width_m <= self.min_width_m:
            self.holding = False
        elif width_m < self.max_width_m:
            self.holding = True
        if not self.holding:
            self.carried = np.zeros((0, 4))
        return self.holding, self.holding and not was
