"""The look skill (core/look.py): over the in-process simulator through the shield, the
wrist camera goes over a named location it did not see and perception then sees it; the
runner's rules for it (no library skill, no look motion, an unknown location)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from carryon_common.core import names
from carryon_common.core.chunk import Chunk
from carryon_common.core.clouds import CameraView
from carryon_common.core.locations import load_locations
from carryon_perception.core.build import build_tabletop
from carryon_recovery.core.library import SkillLibrary
from carryon_recovery.core.look import run_look
from carryon_recovery.core.motion import builtin_motion
from carryon_recovery.core.runner import RecoveryRequest, recover
from carryon_recovery.core.types import Outcome
from carryon_robot.core.kinematics import load_robot
from carryon_shield.core.config import ShieldConfig
from carryon_shield.core.response import load_response_model
from carryon_sim.core.cameras import CameraRig
from carryon_sim.core.driver import Driver
from carryon_sim.core.scene import load_scene, scenes_dir
from carryon_sim.core.world import ARM_JOINTS, WRIST_CAMERA, World
from carryon_sim.harness.episodes import Task
from carryon_sim.harness.recovery_io import SimRecoveryIO
from carryon_sim.harness.shield_gate import SimShieldGate
from carryon_sim.harness.stand_in import stand_in_script

CONFIG = Path(__file__).resolve().parents[2] / "config"
LOCATIONS = load_locations(CONFIG / "planner" / "locations.yaml")


def wrist_only(world: World, rig: CameraRig) -> tuple[tuple[str, ...], list[str]]:
    """What perception makes of the wrist camera alone (a robot without a scene camera):
    the locations out of its view and the objects it sees."""
    perception = build_tabletop(CONFIG, "food_serving", [o.name for o in world.scene.spec.objects])
    f = rig.render(world.data, WRIST_CAMERA)
    view = CameraView("wrist", world.time, f.rgb, f.depth, None, {}, f.K, f.world_from_camera)
    joints = dict(zip(ARM_JOINTS, (float(q) for q in world.arm_q()), strict=True))
    result = perception.perceive([view], joints, world.gripper_width(), world.time)
    return result.out_of_view, sorted(o.label for o in result.objects)


def test_the_wrist_camera_looks_at_a_location_it_did_not_see_through_the_shield() -> None:
    world = World(load_scene(scenes_dir() / "food_serving.yaml"), seed=0)
    world.reset(0)
    response, _ = load_response_model()
    # The shield as in the demo's next subtask (the carrot into the bowl): everything else is an obstacle.
    task = Task("put the carrot in the bowl", stand_in_script("put the carrot in the bowl"), 800)
    shield = SimShieldGate(world, ShieldConfig(), [task], response)
    released: list[tuple[int, int]] = []

    def gate(chunk: Chunk, w: World) -> Chunk | None:
        out = shield(dataclasses.replace(chunk, subtask_id="0"), w)
        released.append((len(chunk), 0 if out is None else len(out)))
        return out

    rig = CameraRig(world.model, world.object_of_body, 256, 256)
    motion = builtin_motion(load_robot(str(CONFIG / "robot" / "panda.yaml")))
    try:
        io = SimRecoveryIO(world, Driver(world, 0.5), rig, motion, gate=gate)
        assert run_look(io, "kitchen_counter", LOCATIONS, tool_height_m=0.72)[0] == Outcome.RESUME
        unseen, _ = wrist_only(world, rig)
        assert unseen == ("dining_table",)  # over the counter, the wrist camera cannot see the table
        outcome, message = run_look(io, "dining_table", LOCATIONS, tool_height_m=0.72)
        unseen, objects = wrist_only(world, rig)
    finally:
        rig.close()
        shield.close()
    assert outcome == Outcome.RESUME, message
    assert np.allclose(world.ee_pose()[0], [0.55, -0.3, 0.72], atol=0.015)
    assert "dining_table" not in unseen and "bowl" in objects
    assert released and all(asked == got for asked, got in released)  # every chunk released whole


class _Io:
    estopped, steps, chunks_sent, chunks_blocked = False, 0, 0, 0

    def tool_position(self) -> Any:
        return np.zeros(3)


def test_look_is_no_library_skill_and_needs_a_look_motion() -> None:
    library = SkillLibrary(CONFIG / "skills" / "recovery")
    request = RecoveryRequest("s1", "dining_table", "", "", skill=names.LOOK_SKILL)
    calls: list[str] = []

    def look(io: Any, location: str) -> tuple[Outcome, str]:
        calls.append(location)
        return Outcome.RESUME, f"looking at {location}"

    ids = iter(["a1"])
    done = recover(library, request, _Io, default_skill="regrasp", new_attempt_id=lambda: next(ids), look=look)
    assert (done.outcome, done.skill, calls) == (Outcome.RESUME, "look", ["dining_table"])
    none = recover(library, request, _Io, default_skill="regrasp", new_attempt_id=lambda: "a2")
    assert none.outcome == Outcome.ABORTED and "no look motion" in none.message


def test_an_unknown_location_is_refused_before_moving() -> None:
    class Unmoved(_Io):
        def move(self, *_: Any) -> tuple[bool, str]:
            raise AssertionError("the arm must not move")

    outcome, message = run_look(Unmoved(), "garden", LOCATIONS, tool_height_m=0.72)  # type: ignore[arg-type]
    assert outcome == Outcome.ABORTED and "dining_table, kitchen_counter" in message
