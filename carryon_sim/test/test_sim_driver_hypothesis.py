"""Property-based fuzz (Hypothesis) of the simulated arm's driver (issue 19), as
test_executor_hypothesis does for the real arm's: sequences of released chunks — within the
limits or not (0 to 10,000 steps, dt of 0, NaN or a day, non-finite numbers, steps too long
or too fast, an ABSOLUTE chunk starting 35 cm from the last target, wrong frames,
mismatched arrays, the e-stop) — submitted while earlier ones still run. A chunk beyond the
limits is refused when queued, and no executed target is farther from the previous one than
MotionLimits allow."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from carryon_common.core.chunk import Chunk, ChunkSource, Convention, InvalidChunk
from carryon_common.core.driver import LIMITS
from carryon_sim.core.driver import Driver
from carryon_sim.core.scene import Scene, SceneSpec
from carryon_sim.core.world import World

NAN, INF = math.nan, math.inf
PERIOD_S = 0.05  # control period of the ticks
EPS = 1e-9  # metres: rounding between the driver's check and this one
TURN_EPS = 1e-6  # radians: the same for turns (a huge rotation vector loses digits when folded)
broken = st.sampled_from([False] * 5 + [True])  # each aspect of a chunk is broken one time in six


@pytest.fixture(scope="module")
def world() -> World:
    return World(Scene(Path("empty.yaml"), SceneSpec(name="empty", description="no objects", objects=[])))


@st.composite
def chunks(draw: st.DrawFn, start: npt.NDArray[np.float64], rotvec: npt.NDArray[np.float64]) -> Chunk:
    """A chunk near `start` (the tool at rest, turned as `rotvec`): steps of one length in one
    direction, each aspect within the limits or broken (steps, dt, length, numbers, shapes,
    frame, and for an ABSOLUTE chunk where it starts: at the tool, a few cm away, or 35 cm
    away), at the tool's rotation."""
    n = draw(st.integers(0, 10_000) | st.sampled_from([0, 201]) if draw(broken) else st.integers(1, 30))
    dt = draw(st.sampled_from([0.0, -0.05, NAN, INF, 1e9, 0.0049]) if draw(broken) else st.floats(0.005, 0.5))
    bound = min(LIMITS.max_step_m, LIMITS.max_speed_m_s * dt) if math.isfinite(dt) and dt > 0 else LIMITS.max_step_m
    length = bound * draw(st.floats(1.0, 10.0, exclude_min=True) if draw(broken) else st.floats(0.0, 1.0))
    direction = np.array(draw(st.tuples(*[st.floats(-1.0, 1.0)] * 3)))
    direction /= max(float(np.linalg.norm(direction)), 1e-9)
    convention = draw(st.sampled_from(Convention))
    moves = np.tile(length * direction, (n, 1))
    first = start + direction * draw(st.sampled_from([0.0, 0.01, 0.04, 0.06, 0.35]))
    arrays = {
        "positions": moves if convention == Convention.DELTA else first + np.cumsum(moves, axis=0) - moves[:1],
        "rotations": np.zeros((n, 3)) if convention == Convention.DELTA else np.tile(rotvec, (n, 1)),
        "gripper": np.full(n, draw(st.floats(0.0, 1.0))),
    }
    if n and draw(broken):
        name = draw(st.sampled_from(sorted(arrays)))
        index = (draw(st.integers(0, n - 1)),) + (() if name == "gripper" else (draw(st.integers(0, 2)),))
        arrays[name][index] = draw(st.sampled_from([NAN, INF, -INF, 1e9, 1.1] if name == "gripper" else [NAN, 1e9]))
    if draw(broken):
        wrong = draw(st.sampled_from(sorted(arrays)))
        arrays[wrong] = np.zeros((n + 1, *arrays[wrong].shape[1:]))
    frame = draw(st.sampled_from(["", "panda_link0", "World"]) if draw(broken) else st.just("world"))
    return Chunk(1, "s1", ChunkSource.POLICY, convention, frame, dt, 1, 0.0, **arrays)


def beyond_limits(chunk: Chunk) -> tuple[list[str], bool]:
    """Why no driver may queue `chunk` (Chunk.validate, the frame and the MotionLimits between
    the chunk's own steps, restated: the first ABSOLUTE step is checked per step), and whether
    a step length sits within EPS of a limit (then either answer is right)."""
    p, r, g, n = chunk.positions, chunk.rotations, chunk.gripper, chunk.positions.shape[0]
    if n == 0 or p.shape != (n, 3) or r.shape != (n, 3) or g.shape != (n,):
        return ["shapes"], False
    if not all(np.isfinite(a).all() for a in (p, r, g)) or not math.isfinite(chunk.dt):
        return ["non-finite numbers"], False
    moves = p if chunk.convention == Convention.DELTA else p[1:] - p[:-1]
    lengths = np.sqrt((moves**2).sum(axis=1))
    bound = min(LIMITS.max_step_m, LIMITS.max_speed_m_s * chunk.dt)
    found = [f"{n} steps"] if n > LIMITS.max_steps else []
    found += [f"dt {chunk.dt}"] if not LIMITS.min_dt_s <= chunk.dt <= LIMITS.max_dt_s else []
    found += ["gripper"] if g.min() < 0.0 or g.max() > 1.0 else []
    found += [f"frame {chunk.frame_id!r}"] if chunk.frame_id != "world" else []
    found += [f"a step of {lengths.max():.4f} m in {chunk.dt} s"] if np.any(lengths > bound + EPS) else []
    spans = np.sqrt((r**2).sum(axis=1))
    if np.any(spans > 2 * math.pi):  # refused whatever else holds: no rotation needs more than a full turn
        found = [*found, "a rotation vector longer than a full turn"]
        return found, bool(np.any(np.abs(spans - 2 * math.pi) < TURN_EPS))
    angles = turns(r, chunk.convention)
    turn_bound = min(LIMITS.max_turn_rad, LIMITS.max_turn_speed_rad_s * chunk.dt)
    found += [f"a turn of {angles.max():.4f} rad in {chunk.dt} s"] if np.any(angles > turn_bound + TURN_EPS) else []
    return found, bool(np.any(np.abs(lengths - bound) <= EPS) or np.any(np.abs(angles - turn_bound) <= TURN_EPS))


def turns(rotvecs: npt.NDArray[np.float64], convention: Convention) -> npt.NDArray[np.float64]:
    """The angle of each step's turn between the chunk's own steps, radians (a DELTA rotation
    vector's length folded into [0, pi]; ABSOLUTE: from the relative rotation's trace)."""
    if convention == Convention.DELTA:
        lengths = np.sqrt((rotvecs**2).sum(axis=1)) % (2 * math.pi)
        return np.minimum(lengths, 2 * math.pi - lengths)
    matrices = Rotation.from_rotvec(rotvecs).as_matrix()
    traces = np.einsum("nij,nij->n", matrices[:-1], matrices[1:])
    return np.arccos(np.clip((traces - 1.0) / 2.0, -1.0, 1.0))


def angle(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> float:
    """The angle between two rotation matrices, radians."""
    return float(np.arccos(np.clip((np.trace(a.T @ b) - 1.0) / 2.0, -1.0, 1.0)))


@settings(max_examples=1000)
@given(plan=st.lists(st.tuples(st.integers(0, 40), broken), min_size=1, max_size=4), data=st.data())
def test_no_step_beyond_the_limits_is_ever_executed(
    world: World, plan: list[tuple[int, bool]], data: st.DataObject
) -> None:
    """plan: per chunk, the ticks to run after submitting it and whether the e-stop is engaged.
    The world is not stepped: the arm stays where it is, so a hold goes back there."""
    world.reset(0)
    driver = Driver(world, watchdog_s=0.25)
    start, rotation = world.ee_pose()
    rotvec = Rotation.from_matrix(rotation).as_rotvec()
    previous, previous_rotation = start, rotation  # the last target
    dt, now = math.nan, world.time  # dt of the steps being executed
    for ticks, estop in plan:
        chunk = data.draw(chunks(start, rotvec))
        driver.estop = estop
        problems, borderline = beyond_limits(chunk)
        try:
            driver.submit(chunk, now)
        except InvalidChunk:
            assert problems or estop or borderline, "a chunk within every limit was refused"
            driver.hold()  # what sim_node does with a refused chunk
            previous, previous_rotation = driver._target_pos.copy(), driver._target_rot.copy()
        else:
            assert not problems and not estop, problems
            dt = chunk.dt
        for _ in range(ticks):
            executed = driver.steps_executed
            now += PERIOD_S
            driver.tick(now)
            target = driver._target_pos.copy()  # the tool target the arm was last sent to (or holds at)
            rotation = driver._target_rot.copy()
            if driver.steps_executed > executed:
                length = float(np.sqrt(((target - previous) ** 2).sum()))
                assert not estop, "a step was executed under the e-stop"
                assert length <= min(LIMITS.max_step_m, LIMITS.max_speed_m_s * dt) + EPS, (length, dt)
                turn = angle(previous_rotation, rotation)
                assert turn <= min(LIMITS.max_turn_rad, LIMITS.max_turn_speed_rad_s * dt) + TURN_EPS, (turn, dt)
            previous, previous_rotation = target, rotation
    event("steps executed" if driver.steps_executed else "no step executed")
