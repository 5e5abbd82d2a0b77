"""`sim_scripted`: a scripted stand-in for a frozen VLA, for simulation only.

It is NOT a learned policy. For each instruction of the skill library it plays a
pick / place / push motion (its script, config/sim/stand_in_scripts.yaml) computed from
simulator ground-truth object poses, the way a capable but unprotected VLA moves:
straight through free space, **ignoring obstacles**, with noisy steps and realistic
failures drawn per episode (the gripper opens while carrying = drop; a grasp too high on
the object = slip / miss; no progress = stuck). The `safe` variant stands in for a
safety-finetuned VLA: it climbs over a configurable fraction of the obstacles near its
path (the paper shields such a model too).

It is closed loop on the measured tool pose: each inference re-reads the robot and object
state, advances through its waypoints when the tool reaches them, and re-plans the grasp
when the target moved before it was grasped. A fresh `reset` (e.g. resuming after a
recovery that left the object in the gripper) starts from the state it finds.

Frames: world (z up, table top at `table_z`). Units: metres, radians, seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from carryon_common.core.chunk import Convention
from carryon_policy.core.policy import (
    FloatArray,
    MissingObservation,
    Observation,
    PolicyMetadata,
    PolicyOutput,
    UnknownInstruction,
)
from carryon_sim.harness.stand_in.geometry import ObjectGeometry, tool_yaw, wrap, yaw_rotvec
from carryon_sim.harness.stand_in.plan import EpisodeDraw, Planner, ScriptedParams, Waypoint, draw_episode
from carryon_sim.harness.stand_in.scripts import Script


class ScriptedPolicy:
    """The stand-in. `scripts`: instruction -> script (load_stand_in_scripts);
    `geometry(scene, name)` returns an object's geometry (injected so the policy does not
    read files); raises MissingObservation for an unknown object."""

    def __init__(
        self,
        scripts: Mapping[str, Script],
        geometry: Callable[[str, str], ObjectGeometry],
        params: ScriptedParams,
        *,
        backend: str = "sim_scripted",
    ) -> None:
        self.scripts = dict(scripts)
        self.geometry = geometry
        self.params = params
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
            instructions=tuple(self.scripts),
        )
        self._script: Script | None = None
        self._rng = np.random.default_rng(0)
        self._draw = EpisodeDraw(None, False, None, np.zeros(3))
        self._planner = Planner(params, geometry, self._draw, self._rng, {})
        self._plan: list[Waypoint] = []
        self._index = 0
        self._arrived_s: float | None = None
        self._planned_target: FloatArray | None = None
        self._transport: tuple[FloatArray, FloatArray] | None = None
        self._dropped = False
        self._stuck_at: FloatArray | None = None

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
        script = self.scripts.get(instruction.strip())
        if script is None:
            raise UnknownInstruction(instruction, self._metadata.instructions)
        self._script = script
        self._rng = np.random.default_rng(seed)
        self._draw = draw_episode(self.params, self._rng)
        self._planner = Planner(self.params, self.geometry, self._draw, self._rng, {})
        self._plan = []
        self._index = 0
        self._arrived_s = None
        self._dropped = False
        self._stuck_at = None

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
            self._replan(script, observation)
        elif self._index < self._grasp_index() and self._target_moved(script, observation):
            index = self._index
            self._replan(script, observation)
            self._index = min(index, len(self._plan))
        self._advance(observation)
        if self._draw.stuck_phase is not None and self.phase == self._draw.stuck_phase and self._stuck_at is None:
            self._stuck_at = observation.robot.ee_position.copy()
        if self._stuck_at is not None:
            return self._dither(observation)
        return self._chunk(observation)

    def _replan(self, script: Script, observation: Observation) -> None:
        plan = self._planner.plan(script, observation)
        self._plan, self._planned_target, self._transport = plan.waypoints, plan.target, plan.transport

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
            yaw += float(np.clip(wrap(waypoint.yaw - yaw), -p.yaw_rate_rad_s * p.dt, p.yaw_rate_rad_s * p.dt))
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
