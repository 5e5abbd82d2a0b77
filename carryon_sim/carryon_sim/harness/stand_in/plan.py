"""The stand-in's motion plans: the tool waypoints of one scripted instruction, computed
from simulator object poses, and the failures it draws per episode.

Frames: world (z up, table top at `table_z`). Units: metres, radians, seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from carryon_policy.core.policy import FloatArray, MissingObservation, Observation
from carryon_sim.harness.stand_in.geometry import (
    FINGER_TIP_BELOW_TCP_M,
    MIN_TIP_CLEARANCE_M,
    OPEN_WIDTH_M,
    UP,
    ObjectGeometry,
    closest_yaw,
    tool_yaw,
)
from carryon_sim.harness.stand_in.scripts import Script


@dataclass(frozen=True)
class ScriptedParams:
    """Noise, speed and failure rates of the stand-in (see PolicyConfig for meanings)."""

    dt: float = 0.05
    horizon: int = 16
    speed_m_s: float = 0.2
    yaw_rate_rad_s: float = 1.5
    noise_m: float = 0.002
    grasp_error_m: float = 0.003
    drop_probability: float = 0.01
    slip_probability: float = 0.01
    stuck_probability: float = 0.005
    avoid_fraction: float | None = None  # None: ignores obstacles (sim_scripted)
    table_z: float = 0.42
    transport_clearance_m: float = 0.10  # transport height above the table
    obstacle_clearance_m: float = 0.10  # how far the safe variant climbs above an obstacle


@dataclass(frozen=True)
class Waypoint:
    """A tool target: position (3,), yaw, gripper command; dwell: seconds to stay once
    reached (gripper closing or opening); tolerance: reached within this distance."""

    phase: str
    position: FloatArray
    yaw: float
    gripper: float
    dwell_s: float = 0.0
    tolerance_m: float = 0.012


@dataclass(frozen=True)
class EpisodeDraw:
    """Failures drawn at reset (the same seed, the same episode)."""

    drop_at: float | None  # fraction of the transport at which the gripper opens
    slip: bool
    stuck_phase: str | None
    grasp_error: FloatArray


@dataclass(frozen=True)
class Plan:
    """Waypoints of one instruction; `target`: the object's position (3,) when planned;
    `transport`: start and end (3,) of the carry segment (None for a push)."""

    waypoints: list[Waypoint]
    target: FloatArray
    transport: tuple[FloatArray, FloatArray] | None


def draw_episode(params: ScriptedParams, rng: np.random.Generator) -> EpisodeDraw:
    """This episode's failures, drawn in a fixed order from `rng`."""
    drop = rng.random() < params.drop_probability
    slip = rng.random() < params.slip_probability
    stuck = rng.random() < params.stuck_probability
    return EpisodeDraw(
        drop_at=float(rng.uniform(0.2, 0.8)) if drop else None,
        slip=bool(slip),
        stuck_phase=str(rng.choice(["approach", "descend", "lift", "transport"])) if stuck else None,
        grasp_error=np.array([*rng.normal(0.0, params.grasp_error_m, 2), 0.0]),
    )


@dataclass
class Planner:
    """Plans one episode. `avoid` remembers, per obstacle, whether the safe variant
    decided (once per episode, from `rng`) to climb over it."""

    params: ScriptedParams
    geometry: Callable[[str, str], ObjectGeometry]
    draw: EpisodeDraw
    rng: np.random.Generator
    avoid: dict[str, bool]

    def pose(self, observation: Observation, name: str) -> FloatArray:
        pose = observation.objects.get(name)
        if pose is None:
            raise MissingObservation(f"object {name!r} is not in the scene {observation.scene!r}")
        return pose.position.astype(np.float64)

    def holding(self, observation: Observation, name: str, geometry: ObjectGeometry) -> bool:
        """The object is between the fingers and off the table (resuming with it in hand).
        Its nominal grasp point may be up to its footprint radius from where the fingers
        actually hold it (a carrot re-grasped near one end, turned in the fingers: 4-5 cm
        off in the demo, where a 4 cm limit made the stand-in open the gripper above the
        bowl, dropping the carrot from its carry height)."""
        assert geometry.grasp_height_m is not None
        grasp_point = self.pose(observation, name) + geometry.grasp_height_m * UP
        reach = max(0.04, geometry.radius_m + 0.02)
        near = np.linalg.norm(grasp_point - observation.robot.ee_position) < reach
        closed = 0.005 < observation.robot.gripper_width_m < OPEN_WIDTH_M - 0.01
        lifted = self.pose(observation, name)[2] > self.params.table_z + 0.015
        return bool(near and closed and lifted)

    def plan(self, script: Script, observation: Observation) -> Plan:
        p = self.params
        target = self.geometry(observation.scene, script.object)
        if target.grasp_height_m is None:
            raise MissingObservation(f"the stand-in cannot grasp {script.object!r} ({target.type})")
        pose = observation.objects.get(script.object)
        if pose is None:
            raise MissingObservation(f"object {script.object!r} is not in the scene {observation.scene!r}")
        base = pose.position.astype(np.float64)
        current_yaw = tool_yaw(observation.robot.ee_rotation)
        yaw = closest_yaw(pose.yaw, target.yaw_symmetry, current_yaw)
        grasp_z = max(base[2] + target.grasp_height_m, p.table_z + FINGER_TIP_BELOW_TCP_M + MIN_TIP_CLEARANCE_M)
        if self.draw.slip:
            grasp_z += target.grasp_height_m + FINGER_TIP_BELOW_TCP_M * 0.75  # closes on the top edge only
        grasp = np.array([base[0], base[1], grasp_z]) + self.draw.grasp_error

        if script.motion == "push":
            return Plan(self._push(script, target, base, yaw), base.copy(), None)
        if script.motion == "pick_place":
            destination = self.geometry(observation.scene, script.destination)
            dest = self.pose(observation, script.destination)
            release_z = dest[2] + destination.height_m + target.grasp_height_m + 0.03
            place = np.array([dest[0], dest[1], release_z])
        else:  # lift_aside: set it down on the table beside where it was
            place = np.array([base[0] + script.offset[0], base[1] + script.offset[1], grasp_z + 0.01])
        # Carry high enough that the object's underside clears what it stood on (or hid).
        lifted_underside = grasp_z - base[2] + 0.06
        carry_z = max(p.table_z + p.transport_clearance_m, place[2] + 0.02, base[2] + lifted_underside)
        carry_z = self._clear_obstacles(
            observation, script=script, start=grasp, end=place, carry_z=carry_z, carried=target
        )
        lift = np.array([grasp[0], grasp[1], carry_z])
        above_place = np.array([place[0], place[1], carry_z])
        tail = [
            Waypoint("transport", above_place, yaw, 1.0, tolerance_m=0.02),
            Waypoint("lower", place, yaw, 1.0),
            Waypoint("release", place, yaw, 0.0, dwell_s=0.4),
            Waypoint("retreat", place + 0.08 * UP, yaw, 0.0, tolerance_m=0.02),
        ]
        if self.holding(observation, script.object, target):
            here = observation.robot.ee_position
            start = np.array([here[0], here[1], carry_z])
            waypoints = [Waypoint("lift", np.array([here[0], here[1], carry_z]), yaw, 1.0, tolerance_m=0.02), *tail]
            return Plan(waypoints, base.copy(), (start, above_place))
        waypoints = [
            Waypoint("approach", grasp + 0.08 * UP, yaw, 0.0, tolerance_m=0.015),
            Waypoint("descend", grasp, yaw, 0.0, tolerance_m=0.008),
            Waypoint("close", grasp, yaw, 1.0, dwell_s=0.5, tolerance_m=0.02),
            Waypoint("lift", lift, yaw, 1.0, tolerance_m=0.02),
            *tail,
        ]
        return Plan(waypoints, base.copy(), (lift, above_place))

    def _push(self, script: Script, target: ObjectGeometry, base: FloatArray, yaw: float) -> list[Waypoint]:
        p = self.params
        direction = np.array([*script.offset, 0.0])
        direction /= np.linalg.norm(direction)
        standoff = target.radius_m + 0.03
        z = max(base[2] + 0.5 * target.height_m, p.table_z + FINGER_TIP_BELOW_TCP_M + MIN_TIP_CLEARANCE_M)
        start = np.array([base[0], base[1], z]) - direction * standoff
        end = start + np.array([*script.offset, 0.0])
        push_yaw = math.atan2(direction[1], direction[0])  # fingers across the push direction
        push_yaw = closest_yaw(push_yaw, math.pi, yaw)
        return [
            Waypoint("approach", start + 0.08 * UP, push_yaw, 1.0, tolerance_m=0.015),
            Waypoint("descend", start, push_yaw, 1.0, tolerance_m=0.008),
            Waypoint("push", end, push_yaw, 1.0, tolerance_m=0.01),
            Waypoint("retreat", end + 0.08 * UP, push_yaw, 1.0, tolerance_m=0.02),
        ]

    def _clear_obstacles(
        self,
        observation: Observation,
        *,
        script: Script,
        start: FloatArray,
        end: FloatArray,
        carry_z: float,
        carried: ObjectGeometry,
    ) -> float:
        """Transport height: unchanged for the plain stand-in; the safe variant climbs over
        each obstacle near the straight path that it decided (once per episode) to avoid."""
        fraction = self.params.avoid_fraction
        if fraction is None:
            return carry_z
        exempt = {script.object, script.destination}
        a, b = start[:2], end[:2]
        ab = b - a
        length_sq = float(ab @ ab)
        for name, pose in sorted(observation.objects.items()):
            if name in exempt or pose.position[2] < self.params.table_z - 0.05:  # offstage
                continue
            geometry = self.geometry(observation.scene, name)
            xy = pose.position[:2]
            t = 0.0 if length_sq == 0.0 else float(np.clip((xy - a) @ ab / length_sq, 0.0, 1.0))
            distance = float(np.linalg.norm(a + t * ab - xy))
            if distance > geometry.radius_m + 0.08 or t in (0.0, 1.0):
                continue  # not on the way (the start and end supports are not obstacles)
            top = float(pose.position[2]) + geometry.height_m
            hangs = carried.grasp_height_m or 0.0
            if carry_z - hangs - FINGER_TIP_BELOW_TCP_M > top + 0.02:
                continue  # already clear
            if name not in self.avoid:
                self.avoid[name] = bool(self.rng.random() < fraction)
            if self.avoid[name]:
                carry_z = max(carry_z, top + hangs + self.params.obstacle_clearance_m)
        return carry_z
