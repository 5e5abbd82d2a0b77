"""`sim_scripted`: a scripted stand-in for a frozen VLA, for simulation only.

It is NOT a learned policy. For each instruction of the skill library it plays a
pick / place / push motion computed from simulator ground-truth object poses, the way a
capable but unprotected VLA moves: straight through free space, **ignoring obstacles**,
with noisy steps and realistic failures drawn per episode (the gripper opens while
carrying = drop; a grasp too high on the object = slip / miss; no progress = stuck). The
`safe` variant stands in for a safety-finetuned VLA: it climbs over a configurable
fraction of the obstacles near its path (the paper shields such a model too).

It is closed loop on the measured tool pose: each inference re-reads the robot and object
state, advances through its waypoints when the tool reaches them, and re-plans the grasp
when the target moved before it was grasped. A fresh `reset` (e.g. resuming after a
recovery that left the object in the gripper) starts from the state it finds.

Frames: world (z up, table top at `table_z`). Units: metres, radians, seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation

from carryon_common.core.chunk import Convention
from carryon_policy.core.policy import (
    FloatArray,
    MissingObservation,
    Observation,
    PolicyMetadata,
    PolicyOutput,
    UnknownInstruction,
)
from carryon_policy.core.skills import Script, SkillLibrary

# Tool orientation with the gripper pointing down and the fingers closing along world y
# (yaw 0); a yaw turns it about world z.
DOWN = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
FINGER_TIP_BELOW_TCP_M = 0.011  # fingertips reach this far below the tool centre point
MIN_TIP_CLEARANCE_M = 0.002  # keep fingertips this far above the table when grasping
OPEN_WIDTH_M = 0.08
UP = np.array([0.0, 0.0, 1.0])


@dataclass(frozen=True)
class ObjectGeometry:
    """What the stand-in knows of an object: its type, footprint radius and height (m),
    and the height above its base at which to grasp it (None = not graspable)."""

    name: str
    type: str
    radius_m: float
    height_m: float
    grasp_height_m: float | None
    yaw_symmetry: float  # grasp yaw repeats every this many radians (0 = any yaw)


# Grasp height above the base (metres, scale 1) and yaw symmetry per object type.
GRASPS: dict[str, tuple[float, float]] = {
    "carrot": (0.014, math.pi),
    "meat": (0.015, math.pi),
    "bread": (0.02, math.pi),
    "cube": (0.02, math.pi / 2),
    "can": (0.065, 0.0),
    "cover": (0.083, math.pi),  # by its knob, across its narrow side
}


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


def tool_yaw(rotation: FloatArray) -> float:
    """Yaw of a downward-pointing tool from its rotation matrix (3, 3)."""
    finger_axis = rotation[:, 0]
    return float(math.atan2(-finger_axis[0], finger_axis[1]))


def yaw_rotvec(yaw: float) -> FloatArray:
    """Rotation vector (3,) of the downward tool turned by `yaw` about world z."""
    rotvec: FloatArray = Rotation.from_matrix(Rotation.from_euler("z", yaw).as_matrix() @ DOWN).as_rotvec()
    return rotvec


def _closest_yaw(target: float, symmetry: float, current: float) -> float:
    if symmetry <= 0.0:
        return current
    k = round((current - target) / symmetry)
    return target + k * symmetry


def _wrap(angle: float) -> float:
    return (angle + math.pi) % (2 * math.pi) - math.pi


class ScriptedPolicy:
    """The stand-in. `geometry(scene, name)` returns an object's geometry (injected so the
    policy core does not read files); raises MissingObservation for an unknown object."""

    def __init__(
        self,
        library: SkillLibrary,
        geometry: Callable[[str, str], ObjectGeometry],
        params: ScriptedParams,
        *,
        backend: str = "sim_scripted",
    ) -> None:
        self.library = library
        self.geometry = geometry
        self.params = params
        scripted = tuple(s.instruction for s in library.vla if s.script is not None)
        safe = params.avoid_fraction is not None
        self._metadata = PolicyMetadata(
            backend=backend,
            description=(
                "SCRIPTED STAND-IN for a "
                + ("safety-finetuned " if safe else "")
                + "frozen VLA (simulation only): motions from simulator ground truth, "
                + ("avoids some obstacles" if safe else "ignores obstacles")
                + ", noisy, fails by drop / slip / stuck"
            ),
            convention=Convention.ABSOLUTE,
            horizon=params.horizon,
            needs_ground_truth=True,
            scripted=True,
            instructions=scripted,
        )
        self._script: Script | None = None
        self._rng = np.random.default_rng(0)
        self._draw = EpisodeDraw(None, False, None, np.zeros(3))
        self._plan: list[Waypoint] = []
        self._index = 0
        self._arrived_s: float | None = None
        self._planned_target: FloatArray | None = None
        self._transport: tuple[FloatArray, FloatArray] | None = None
        self._dropped = False
        self._stuck_at: FloatArray | None = None
        self._avoid: dict[str, bool] = {}

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    @property
    def phase(self) -> str:
        """Current phase ("done" after the last waypoint, "stuck" when dithering)."""
        if self._stuck_at is not None:
            return "stuck"
        return self._plan[self._index].phase if self._index < len(self._plan) else "done"

    def reset(self, instruction: str, seed: int) -> None:
        skill = self.library.find(instruction)
        if skill is None or skill.script is None:
            reason = "" if skill is None else "it has no script for the simulation stand-in"
            raise UnknownInstruction(instruction, self._metadata.instructions, reason)
        p = self.params
        self._script = skill.script
        self._rng = np.random.default_rng(seed)
        rng = self._rng
        drop = rng.random() < p.drop_probability
        slip = rng.random() < p.slip_probability
        stuck = rng.random() < p.stuck_probability
        self._draw = EpisodeDraw(
            drop_at=float(rng.uniform(0.2, 0.8)) if drop else None,
            slip=bool(slip),
            stuck_phase=str(rng.choice(["approach", "descend", "lift", "transport"])) if stuck else None,
            grasp_error=np.array([*rng.normal(0.0, p.grasp_error_m, 2), 0.0]),
        )
        self._plan = []
        self._index = 0
        self._arrived_s = None
        self._dropped = False
        self._stuck_at = None
        self._avoid = {}

    def close(self) -> None:
        self._plan = []

    # -- inference -----------------------------------------------------------------------
    def infer(self, observation: Observation) -> PolicyOutput:
        if self._script is None:
            raise MissingObservation("reset() with an instruction before infer()")
        if not observation.objects:
            raise MissingObservation("the scripted stand-in needs simulator object poses (sim/truth)")
        script = self._script
        if not self._plan:
            self._plan = self._make_plan(script, observation)
        elif self._index < self._grasp_index() and self._target_moved(script, observation):
            index = self._index
            self._plan = self._make_plan(script, observation)
            self._index = min(index, len(self._plan))
        self._advance(observation)
        if self._draw.stuck_phase is not None and self.phase == self._draw.stuck_phase and self._stuck_at is None:
            self._stuck_at = observation.robot.ee_position.copy()
        if self._stuck_at is not None:
            return self._dither(observation)
        return self._chunk(observation)

    def _grasp_index(self) -> int:
        for i, waypoint in enumerate(self._plan):
            if waypoint.phase == "close":
                return i
        return 0

    def _target_moved(self, script: Script, observation: Observation) -> bool:
        pose = observation.objects.get(script.object)
        if pose is None or self._planned_target is None:
            return False
        return bool(np.linalg.norm(pose.position[:2] - self._planned_target[:2]) > 0.01)

    def _advance(self, observation: Observation) -> None:
        """Move the cursor past the waypoints the tool has reached (or overshot along the
        next segment: chunks look ahead past a waypoint) and past finished dwells."""
        now = observation.stamp_s
        position = observation.robot.ee_position
        while self._index < len(self._plan):
            waypoint = self._plan[self._index]
            if self._arrived_s is not None:
                if now - self._arrived_s < waypoint.dwell_s:
                    return
            elif not self._reached(position, self._index):
                return
            elif waypoint.dwell_s > 0.0:
                self._arrived_s = now
                return
            self._arrived_s = None
            self._index += 1

    def _reached(self, position: FloatArray, index: int) -> bool:
        waypoint = self._plan[index]
        if np.linalg.norm(position - waypoint.position) <= waypoint.tolerance_m:
            return True
        if index + 1 >= len(self._plan) or waypoint.dwell_s > 0.0:
            return False
        start, end = waypoint.position, self._plan[index + 1].position
        segment = end - start
        length_sq = float(segment @ segment)
        if length_sq < 1e-9:
            return False
        t = float((position - start) @ segment / length_sq)
        closest = start + min(t, 1.0) * segment
        return t > 0.0 and bool(np.linalg.norm(position - closest) <= max(waypoint.tolerance_m, 0.015))

    def _chunk(self, observation: Observation) -> PolicyOutput:
        p = self.params
        step = p.speed_m_s * p.dt
        position = observation.robot.ee_position.astype(np.float64).copy()
        yaw = tool_yaw(observation.robot.ee_rotation)
        dwell_left = 0.0
        if self._arrived_s is not None:
            dwell_left = max(0.0, self._plan[self._index].dwell_s - (observation.stamp_s - self._arrived_s))
        index = self._index
        positions, yaws, grippers = [], [], []
        for _ in range(p.horizon):
            if index >= len(self._plan):
                gripper = 0.0 if self._dropped or not self._plan else self._plan[-1].gripper
                positions.append(position.copy())
                yaws.append(yaw)
                grippers.append(gripper)
                continue
            waypoint = self._plan[index]
            offset = waypoint.position - position
            distance = float(np.linalg.norm(offset))
            if distance > step:
                position = position + offset * (step / distance)
            else:
                position = waypoint.position.copy()
                if waypoint.dwell_s > 0.0 and dwell_left <= 0.0 and index == self._index and self._arrived_s is None:
                    dwell_left = waypoint.dwell_s
                if dwell_left > p.dt / 2:
                    dwell_left -= p.dt
                else:
                    index += 1
                    dwell_left = self._plan[index].dwell_s if index < len(self._plan) else 0.0
            yaw += float(np.clip(_wrap(waypoint.yaw - yaw), -p.yaw_rate_rad_s * p.dt, p.yaw_rate_rad_s * p.dt))
            positions.append(position.copy())
            yaws.append(yaw)
            grippers.append(self._gripper_for(waypoint, observation))
        noisy = np.asarray(positions) + self._rng.normal(0.0, p.noise_m, (p.horizon, 3))
        return PolicyOutput(
            positions=noisy,
            rotations=np.stack([yaw_rotvec(y) for y in yaws]),
            gripper=np.asarray(grippers, dtype=np.float64),
            convention=Convention.ABSOLUTE,
        )

    def _gripper_for(self, waypoint: Waypoint, observation: Observation) -> float:
        """The waypoint's gripper command, unless this episode drops the object now."""
        if self._dropped:
            return 0.0
        drop_at = self._draw.drop_at
        if drop_at is not None and waypoint.phase == "transport" and self._transport is not None:
            start, end = self._transport
            length = float(np.linalg.norm(end[:2] - start[:2]))
            done = float(np.linalg.norm(observation.robot.ee_position[:2] - start[:2]))
            if length > 0.0 and done / length >= drop_at:
                self._dropped = True
                return 0.0
        return waypoint.gripper

    def _dither(self, observation: Observation) -> PolicyOutput:
        """Stuck: small random motions about where it got stuck, no progress."""
        assert self._stuck_at is not None
        p = self.params
        positions = self._stuck_at + self._rng.normal(0.0, 0.004, (p.horizon, 3))
        yaw = tool_yaw(observation.robot.ee_rotation)
        gripper = self._plan[self._index].gripper if self._index < len(self._plan) else 0.0
        return PolicyOutput(
            positions=positions,
            rotations=np.tile(yaw_rotvec(yaw), (p.horizon, 1)),
            gripper=np.full(p.horizon, gripper),
            convention=Convention.ABSOLUTE,
        )

    # -- planning ------------------------------------------------------------------------
    def _pose(self, observation: Observation, name: str) -> FloatArray:
        pose = observation.objects.get(name)
        if pose is None:
            raise MissingObservation(f"object {name!r} is not in the scene {observation.scene!r}")
        return pose.position.astype(np.float64)

    def _holding(self, observation: Observation, name: str, geometry: ObjectGeometry) -> bool:
        """The object is between the fingers and off the table (resuming with it in hand)."""
        assert geometry.grasp_height_m is not None
        grasp_point = self._pose(observation, name) + geometry.grasp_height_m * UP
        near = np.linalg.norm(grasp_point - observation.robot.ee_position) < 0.04
        closed = 0.005 < observation.robot.gripper_width_m < OPEN_WIDTH_M - 0.01
        lifted = self._pose(observation, name)[2] > self.params.table_z + 0.015
        return bool(near and closed and lifted)

    def _make_plan(self, script: Script, observation: Observation) -> list[Waypoint]:
        p = self.params
        target = self.geometry(observation.scene, script.object)
        if target.grasp_height_m is None:
            raise MissingObservation(f"the stand-in cannot grasp {script.object!r} ({target.type})")
        pose = observation.objects.get(script.object)
        if pose is None:
            raise MissingObservation(f"object {script.object!r} is not in the scene {observation.scene!r}")
        base = pose.position.astype(np.float64)
        self._planned_target = base.copy()
        current_yaw = tool_yaw(observation.robot.ee_rotation)
        yaw = _closest_yaw(pose.yaw, target.yaw_symmetry, current_yaw)
        grasp_z = max(base[2] + target.grasp_height_m, p.table_z + FINGER_TIP_BELOW_TCP_M + MIN_TIP_CLEARANCE_M)
        if self._draw.slip:
            grasp_z += target.grasp_height_m + FINGER_TIP_BELOW_TCP_M * 0.75  # closes on the top edge only
        grasp = np.array([base[0], base[1], grasp_z]) + self._draw.grasp_error

        if script.motion == "push":
            return self._push_plan(script, target, base, yaw)
        if script.motion == "pick_place":
            destination = self.geometry(observation.scene, script.destination)
            dest = self._pose(observation, script.destination)
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
        self._transport = (lift, above_place)
        tail = [
            Waypoint("transport", above_place, yaw, 1.0, tolerance_m=0.02),
            Waypoint("lower", place, yaw, 1.0),
            Waypoint("release", place, yaw, 0.0, dwell_s=0.4),
            Waypoint("retreat", place + 0.08 * UP, yaw, 0.0, tolerance_m=0.02),
        ]
        if self._holding(observation, script.object, target):
            here = observation.robot.ee_position
            self._transport = (np.array([here[0], here[1], carry_z]), above_place)
            return [Waypoint("lift", np.array([here[0], here[1], carry_z]), yaw, 1.0, tolerance_m=0.02), *tail]
        return [
            Waypoint("approach", grasp + 0.08 * UP, yaw, 0.0, tolerance_m=0.015),
            Waypoint("descend", grasp, yaw, 0.0, tolerance_m=0.008),
            Waypoint("close", grasp, yaw, 1.0, dwell_s=0.5, tolerance_m=0.02),
            Waypoint("lift", lift, yaw, 1.0, tolerance_m=0.02),
            *tail,
        ]

    def _push_plan(self, script: Script, target: ObjectGeometry, base: FloatArray, yaw: float) -> list[Waypoint]:
        p = self.params
        direction = np.array([*script.offset, 0.0])
        direction /= np.linalg.norm(direction)
        standoff = target.radius_m + 0.03
        z = max(base[2] + 0.5 * target.height_m, p.table_z + FINGER_TIP_BELOW_TCP_M + MIN_TIP_CLEARANCE_M)
        start = np.array([base[0], base[1], z]) - direction * standoff
        end = start + np.array([*script.offset, 0.0])
        push_yaw = math.atan2(direction[1], direction[0])  # fingers across the push direction
        push_yaw = _closest_yaw(push_yaw, math.pi, yaw)
        self._transport = None
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
            if name not in self._avoid:
                self._avoid[name] = bool(self._rng.random() < fraction)
            if self._avoid[name]:
                carry_z = max(carry_z, top + hangs + self.params.obstacle_clearance_m)
        return carry_z
