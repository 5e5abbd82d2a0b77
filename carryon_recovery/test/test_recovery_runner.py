"""recovery's request rules without ROS (core/runner.py) and the motion backend registry:
an unknown skill or version aborts before the robot is touched, no robot state aborts, a
target that is not found ends at the fallback with the attempt recorded, an e-stop turns
the outcome into ABORTED; backends are picked by name with a suggestion on a typo."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from carryon_common.core.errors import CarryOnError, UnknownNameError
from carryon_recovery.core.base_skill import Seen
from carryon_recovery.core.config import MOTION_BACKENDS as CONFIGURED
from carryon_recovery.core.config import RecoveryConfig
from carryon_recovery.core.library import SkillLibrary
from carryon_recovery.core.motion import CartesianIk
from carryon_recovery.core.reflection import Attempt
from carryon_recovery.core.runner import RecoveryRequest, recover
from carryon_recovery.core.types import Outcome
from carryon_recovery.motion_backends import MOTION_BACKENDS, make_motion
from carryon_robot.core.kinematics import load_robot

CONFIG = Path(__file__).resolve().parents[2] / "config"
LIBRARY = SkillLibrary(CONFIG / "skills" / "recovery")
REQUEST = RecoveryRequest("s2", "carrot", "bowl", "put the carrot in the bowl", "dropped")


@dataclass
class BlindIO:
    """Sees nothing, reaches every pose; counts what it was asked."""

    estopped: bool = False
    no_state: bool = False
    steps: int = 0
    chunks_sent: int = 0
    chunks_blocked: int = 0
    moves: list[int] = field(default_factory=list)

    def perceive(self, target: str, destination: str) -> Seen | None:
        return None

    def move(self, positions: np.ndarray, rotation: np.ndarray, gripper: float) -> tuple[bool, str]:
        self.moves.append(len(positions))
        self.steps += len(positions)
        self.chunks_sent += 1
        return True, ""

    def set_gripper(self, command: float) -> float:
        return 0.08

    def tool_position(self) -> np.ndarray:
        if self.no_state:
            raise CarryOnError("no end-effector pose yet")
        return np.array([0.4, 0.0, 0.3])


def run(io: BlindIO, request: RecoveryRequest = REQUEST) -> tuple[object, list[Attempt], list[str]]:
    records: list[Attempt] = []
    ids: list[str] = []

    def new_id() -> str:
        ids.append(f"{request.subtask_id}-{len(ids) + 1}")
        return ids[-1]

    result = recover(
        LIBRARY, request, lambda: io, default_skill="regrasp", new_attempt_id=new_id, record=records.append
    )
    return result, records, ids


def test_an_unknown_skill_aborts_before_the_robot_is_asked() -> None:
    io = BlindIO()
    result, records, ids = run(io, RecoveryRequest("s2", "carrot", "bowl", "x", skill="regrab"))
    assert result.outcome == Outcome.ABORTED and result.message.startswith("skill library:")
    assert records == [] and ids == [] and io.moves == []


def test_no_robot_state_aborts() -> None:
    result, records, _ids = run(BlindIO(no_state=True))
    assert result.outcome == Outcome.ABORTED and result.message == "no robot state: no end-effector pose yet"
    assert records == [] and result.skill == "regrasp" and result.version == 1


def test_a_missing_target_ends_at_the_fallback_with_the_attempt_recorded() -> None:
    io = BlindIO()
    result, records, ids = run(io)
    assert result.outcome == Outcome.RESUME_UNVERIFIED and ids == ["s2-1"]
    assert [r.attempt_id for r in records] == ["s2-1"] and records[0].outcome == "fallback"
    assert result.message.endswith(f"({io.steps} steps, 1 chunks, 0 not released whole by the shield)")


def test_an_emergency_stop_aborts() -> None:
    result, _records, _ids = run(BlindIO(estopped=True))
    assert result.outcome == Outcome.ABORTED and result.message.startswith("emergency stop: ")


def test_motion_backends_by_name() -> None:
    assert MOTION_BACKENDS.names() == sorted(CONFIGURED)
    robot = load_robot(str(CONFIG / "robot" / "panda.yaml"))
    assert isinstance(make_motion(robot, RecoveryConfig()), CartesianIk)
    with pytest.raises(UnknownNameError, match="did you mean 'moveit_py'"):
        MOTION_BACKENDS.get("moveit")
