"""Data the shield's core works on: camera frames, the task, the robot state, obstacles.

Frames: everything is in the world frame (z up) unless a field says otherwise. Units:
metres, radians, seconds (node clock; simulation time in simulation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from carryon_common.core.contact_rules import ContactTask, touchable
from carryon_common.core.errors import CarryOnError
from carryon_shield.core.kernel import PointGrid

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int32]
BoolArray = npt.NDArray[np.bool_]


class PerceptionUnavailable(CarryOnError):
    """No usable obstacle set or robot state (missing, stale, unknown frame): fail closed."""


@dataclass(frozen=True)
class RgbdFrame:
    """One camera view. depth (H, W) float metres along the optical axis (0 / non-finite:
    no return); rgb (H, W, 3) uint8 or None; segmentation (H, W) int instance ids or None,
    with `labels` id -> name; K (3, 3) intrinsics, pixels; world_from_camera (4, 4) pose
    of the ROS optical frame. depth_stamp_s / mask_stamp_s: acquisition times."""

    camera: str
    depth: npt.NDArray[np.floating]
    K: FloatArray
    world_from_camera: FloatArray
    depth_stamp_s: float
    rgb: npt.NDArray[np.uint8] | None = None
    segmentation: npt.NDArray[np.integer] | None = None
    labels: dict[int, str] = field(default_factory=dict)
    mask_stamp_s: float = -np.inf


# Which of a frame's world points (N, 3) lie inside the robot at the frame's instant (N,) bool.
SelfFilter = Callable[["RgbdFrame", FloatArray], BoolArray]


@dataclass(frozen=True)
class TaskSpec(ContactTask):
    """What the current subtask may touch (SetTask): the shared `ContactTask` (its target,
    the target's source support — only a patch at the target is exempt —, the destination
    and further permitted contacts), read by the rules of carryon_common.core.contact_rules
    that the simulator's contact monitor applies too."""

    def exempt_names(self) -> set[str]:
        """Objects exempt as a whole (the support only as a patch): `contact_rules.touchable`."""
        return set(touchable(self))


@dataclass(frozen=True)
class RobotState:
    """Measured tool centre point: position (3,), rotation (3, 3) (tool z = approach
    direction, tool x = finger axis), velocity (3,) m/s; gripper width, metres; the
    gripper command being executed (0 open .. 1 closed); stamp of the measurement."""

    position: FloatArray
    rotation: FloatArray
    velocity: FloatArray
    gripper_width_m: float
    gripper_command: float
    stamp_s: float
    commanded_position: FloatArray | None = None  # the driver's current target, when known (delta chunks)
    commanded_rotation: FloatArray | None = None
    joints: FloatArray | None = None  # measured arm joints (the robot description's order), when known


@dataclass
class ObstacleSet:
    """Obstacle points (N, 3) with the index (N,) into `names` of the object each came
    from, plus the target's own points (K, 3) (carried geometry, exemption patches).
    `stamp_s`: the oldest sensor stamp that went into it. The filter's grid is built once."""

    points: FloatArray
    label_index: IntArray
    names: tuple[str, ...]
    stamp_s: float
    frame_id: str
    target_points: FloatArray = field(default_factory=lambda: np.zeros((0, 3)))
    exempt_points: int = 0  # points dropped as target / source patch / destination / permitted
    robot_points: int = 0  # points dropped as the robot
    image_stamps: tuple[float, ...] = ()  # depth stamp of each camera's image that went into it
    # The other exempt points (source patch, destination, permitted), downsampled, with their
    # label indices: exempt for the hand only; the arm's links may touch none of them.
    exempt_cloud: FloatArray = field(default_factory=lambda: np.zeros((0, 3)))
    exempt_label_index: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    target_label: int = -1  # index into `names` of the target (its points: target_points)
    _grid: PointGrid | None = field(default=None, repr=False)
    _arm_grids: dict[bool, PointGrid | None] = field(default_factory=lambda: {False: None, True: None}, repr=False)

    def __len__(self) -> int:
        return int(self.points.shape[0])

    @property
    def grid(self) -> PointGrid:
        """The points sorted into a uniform grid for the filter (built once, on first use)."""
        if self._grid is None:
            self._grid = PointGrid.build(self.points)
        return self._grid

    def name_of(self, index: int) -> str:
        return self.names[int(self.label_index[index])] if 0 <= index < len(self) else ""

    def arm_grid(self, holding: bool) -> PointGrid:
        """What the arm's links are checked against: the obstacle points, then the other exempt
        points, then the target's (not while holding it: a carried object is attached to the
        hand, which the carried-object check covers). Indices from len(self) on are read by
        `arm_point` / `arm_name_of`."""
        if self._arm_grids[holding] is None:
            self._arm_grids[holding] = PointGrid.build(self._arm_points(holding))
        grid = self._arm_grids[holding]
        assert grid is not None
        return grid

    def _arm_points(self, holding: bool) -> FloatArray:
        parts = [self.points, self.exempt_cloud] + ([] if holding else [self.target_points])
        return np.vstack(parts)

    def arm_point(self, index: int) -> FloatArray:
        out: FloatArray = self._arm_points(False)[index]
        return out

    def arm_name_of(self, index: int) -> str:
        if 0 <= index < len(self):
            return self.name_of(index)
        extra = index - len(self)
        if 0 <= extra < len(self.exempt_cloud):
            return self.names[int(self.exempt_label_index[extra])]
        in_target = 0 <= extra - len(self.exempt_cloud) < len(self.target_points)
        return self.names[self.target_label] if in_target and 0 <= self.target_label < len(self.names) else "the target"
