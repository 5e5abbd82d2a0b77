"""Assembles observations from the latest sensor messages, refusing stale ones.

The node stores each message here as it arrives (with its acquisition stamp on the node
clock); `build(now)` returns an Observation only when every part the backend needs is
present and younger than `max_age_s`, else raises StaleObservation naming the parts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.spatial.transform import Rotation

from carryon_policy.core.policy import (
    FloatArray,
    ImageArray,
    ObjectPose,
    Observation,
    PolicyError,
    RobotState,
)


class StaleObservation(PolicyError):
    """A required observation part is missing or older than the configured age."""


@dataclass(frozen=True)
class Stamped:
    stamp_s: float


@dataclass(frozen=True)
class EePose(Stamped):
    position: FloatArray  # (3,) metres
    rotation: FloatArray  # (3, 3)
    frame_id: str


@dataclass(frozen=True)
class Joints(Stamped):
    positions: FloatArray  # (n,) radians


@dataclass(frozen=True)
class Width(Stamped):
    width_m: float


@dataclass(frozen=True)
class Image(Stamped):
    rgb: ImageArray  # (H, W, 3)


@dataclass(frozen=True)
class Truth(Stamped):
    scene: str
    objects: Mapping[str, ObjectPose]


@dataclass
class ObservationBuffer:
    """Latest message of each kind. cameras: the images required; needs_truth: whether
    simulator ground truth is required (the scripted stand-in)."""

    cameras: tuple[str, ...]
    needs_truth: bool
    max_age_s: float
    ee: EePose | None = None
    joints: Joints | None = None
    width: Width | None = None
    images: dict[str, Image] = field(default_factory=dict)
    truth: Truth | None = None
    _next_id: int = 1

    def build(self, now_s: float, steps_executed: int = 0) -> Observation:
        """An observation stamped with its oldest part; StaleObservation lists what is
        missing or too old (ages in seconds on the node clock)."""
        parts, problems = self.parts(now_s)
        if problems:
            raise StaleObservation("no inference: " + "; ".join(problems))
        assert self.ee is not None and self.joints is not None and self.width is not None
        stamp = min(p.stamp_s for p in parts.values() if p is not None)
        observation_id = self._next_id
        self._next_id += 1
        return Observation(
            observation_id=observation_id,
            stamp_s=stamp,
            robot=RobotState(
                ee_position=self.ee.position,
                ee_rotation=self.ee.rotation,
                joint_positions=self.joints.positions,
                gripper_width_m=self.width.width_m,
                frame_id=self.ee.frame_id,
            ),
            images={name: self.images[name].rgb for name in self.cameras},
            objects=dict(self.truth.objects) if self.truth is not None else {},
            scene=self.truth.scene if self.truth is not None else "",
            steps_executed=steps_executed,
        )

    def parts(self, now_s: float) -> tuple[dict[str, Stamped | None], list[str]]:
        """The latest message of each input, and what is missing or too old at `now_s`."""
        parts: dict[str, Stamped | None] = {
            "ee_pose": self.ee,
            "joint_states": self.joints,
            "gripper/width": self.width,
        }
        parts.update({f"camera/{name}/color": self.images.get(name) for name in self.cameras})
        if self.needs_truth:
            parts["sim/truth"] = self.truth
        problems = []
        for name, part in parts.items():
            if part is None:
                problems.append(f"{name}: nothing received")
            elif now_s - part.stamp_s > self.max_age_s:
                problems.append(f"{name}: {now_s - part.stamp_s:.2f} s old (max {self.max_age_s:.2f} s)")
            elif part.stamp_s - now_s > self.max_age_s:  # from before a simulator reset, or clocks out of sync
                problems.append(f"{name}: stamped {part.stamp_s - now_s:.2f} s ahead of the node clock")
        return parts, problems


def quaternion_to_matrix(xyzw: FloatArray) -> FloatArray:
    """Rotation matrix (3, 3) of a unit quaternion given as x, y, z, w (ROS order)."""
    matrix: FloatArray = Rotation.from_quat(np.asarray(xyzw, dtype=np.float64)).as_matrix()
    return matrix
