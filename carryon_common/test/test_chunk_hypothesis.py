"""Property-based fuzz (Hypothesis) of what every robot driver checks before it queues a
released chunk (carryon_common.core.driver, issue 19): chunks of 0 to 10,000 steps, dt of
0, negative, NaN, infinite or a day, non-finite or huge positions, jumps, both conventions,
wrong frames and mismatched array lengths — as core chunks and as ActionChunk messages.
A chunk is refused (InvalidChunk, never another exception) exactly when it is beyond the
limits restated independently below."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Vector3
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from carryon_common import convert
from carryon_common.core import message_checks
from carryon_common.core.chunk import Chunk, ChunkSource, Convention, InvalidChunk
from carryon_common.core.driver import LIMITS, MotionLimits, check_executable, step_beyond_limits
from carryon_common.core.errors import InvalidMessage
from carryon_interfaces.msg import ActionChunk, ActionStep

NAN, INF = math.nan, math.inf
# Infinities and 1e300 overflow and subtract to NaN on purpose: numpy's warnings say nothing here.
pytestmark = pytest.mark.filterwarnings("ignore:(overflow|invalid value) encountered:RuntimeWarning")
BAD_NUMBERS = [NAN, INF, -INF, 1e9, -1e9, 1e300]
BAD_DTS = [0.0, -0.05, NAN, INF, -INF, 1e9, 1e-9, 0.0049, 0.51]
BAD_FRAMES = ["", "panda_link0", "World", "world\x00", " world"]
EPS = 1e-12  # metres: what separates "within" from "beyond" a limit when the two checks round differently
TURN_EPS = 1e-6  # radians: the same for turns (huge rotation vectors lose digits when folded)
broken = st.sampled_from([False, False, False, True])  # each aspect of a chunk is broken one time in four


@st.composite
def chunks(draw: st.DrawFn, max_steps: int = 10_000) -> Chunk:
    """A chunk with each aspect (step count, dt, step length, finite numbers, gripper range,
    array shapes, frame) within the limits or, one time in four, broken: 0 or thousands of
    steps, dt of 0, NaN or a day, steps longer or faster than allowed, NaN, infinity or
    huge values, arrays of the wrong length, another frame."""
    n = draw(
        st.integers(0, max_steps) | st.sampled_from([0, 201, max_steps])
        if draw(broken)
        else st.integers(1, LIMITS.max_steps)
    )
    dt = draw(st.sampled_from(BAD_DTS) | st.floats() if draw(broken) else st.floats(LIMITS.min_dt_s, LIMITS.max_dt_s))
    bound = min(LIMITS.max_step_m, LIMITS.max_speed_m_s * dt) if math.isfinite(dt) and dt > 0 else LIMITS.max_step_m
    scale = draw(st.floats(1.0, 10.0, exclude_min=True) if draw(broken) else st.floats(0.0, 1.0))
    convention = draw(st.sampled_from(Convention))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    directions = rng.normal(size=(n, 3))
    moves = bound * scale * directions / np.maximum(np.linalg.norm(directions, axis=1, keepdims=True), 1e-12)
    start = np.array([0.5, 0.0, 0.8])
    positions = moves if convention == Convention.DELTA else start + np.cumsum(moves, axis=0)
    # Turns as moves: about random axes for DELTA steps; ABSOLUTE rotations about one axis from a random start.
    turn_bound = LIMITS.turn_limit_rad(dt) if math.isfinite(dt) and dt > 0 else LIMITS.max_turn_rad
    turn_scale = draw(st.floats(1.0, 10.0, exclude_min=True) if draw(broken) else st.floats(0.0, 1.0))
    axes = rng.normal(size=(n, 3))
    axes /= np.maximum(np.linalg.norm(axes, axis=1, keepdims=True), 1e-12)
    turns = turn_bound * turn_scale * rng.uniform(size=(n, 1))
    # ABSOLUTE: angles about one axis, wrapped into [-pi, pi) (the same rotations, short vectors).
    angles = (rng.uniform(-3, 3) + np.cumsum(turns) + math.pi) % (2 * math.pi) - math.pi
    rotations = turns * axes if convention == Convention.DELTA else axes[:1] * angles[:, None]
    arrays = {"positions": positions, "rotations": rotations, "gripper": rng.uniform(size=n)}
    if n and draw(broken):
        for _ in range(draw(st.integers(1, 3))):
            name = draw(st.sampled_from(sorted(arrays)))
            index = (draw(st.integers(0, n - 1)),) + (() if name == "gripper" else (draw(st.integers(0, 2)),))
            arrays[name][index] = draw(st.sampled_from([*BAD_NUMBERS, -0.1, 1.1] if name == "gripper" else BAD_NUMBERS))
    if draw(broken):
        wrong = draw(st.sampled_from(sorted(arrays)))
        width = arrays[wrong].shape[1:]
        arrays[wrong] = np.zeros(draw(st.sampled_from([(n + 1, *width), (max(0, n - 1), *width), (n, 2)])))
    return Chunk(
        chunk_id=draw(st.integers(0, 2**64 - 1)),
        subtask_id="s1",
        source=draw(st.sampled_from(ChunkSource)),
        convention=convention,
        frame_id=draw(st.sampled_from(BAD_FRAMES) if draw(broken) else st.just("world")),
        dt=dt,
        observation_id=1,
        observation_stamp_s=100.0,
        **arrays,
    )


def limit_problems(chunk: Chunk, limits: MotionLimits = LIMITS) -> tuple[list[str], bool]:
    """Why no driver may execute `chunk` (an independent restatement of Chunk.validate and
    MotionLimits), and whether a step length sits within EPS of a limit (then either answer
    is right)."""
    p, r, g, n = chunk.positions, chunk.rotations, chunk.gripper, chunk.positions.shape[0]
    if n == 0 or p.shape != (n, 3) or r.shape != (n, 3) or g.shape != (n,):
        return [f"shapes {p.shape} {r.shape} {g.shape}"], False
    found = []
    if n > limits.max_steps:
        found.append(f"{n} steps")
    if not all(np.isfinite(a).all() for a in (p, r, g)) or not math.isfinite(chunk.dt):
        return [*found, "non-finite"], False
    if not limits.min_dt_s <= chunk.dt <= limits.max_dt_s:
        found.append(f"dt {chunk.dt}")
    if g.min() < 0.0 or g.max() > 1.0:
        found.append("gripper outside [0, 1]")
    if chunk.frame_id != "world":
        found.append(f"frame {chunk.frame_id!r}")
    moves = p if chunk.convention == Convention.DELTA else p[1:] - p[:-1]
    lengths = np.sqrt((moves**2).sum(axis=1))
    bound = min(limits.max_step_m, limits.max_speed_m_s * chunk.dt) if chunk.dt > 0 else 0.0
    if np.any(lengths > bound):
        found.append(f"a step of {lengths.max():.4f} m in {chunk.dt} s")
    spans = np.sqrt((r**2).sum(axis=1))
    if np.any(spans > 2 * math.pi):  # refused whatever else holds: no rotation needs more than a full turn
        found = [*found, "a rotation vector longer than a full turn"]
        return found, bool(np.any(np.abs(spans - 2 * math.pi) < TURN_EPS))
    angles = turns(r, chunk.convention)
    turn_bound = min(limits.max_turn_rad, limits.max_turn_speed_rad_s * chunk.dt) if chunk.dt > 0 else 0.0
    if np.any(~(angles <= turn_bound)):
        found.append(f"a turn of {np.nanmax(angles, initial=math.inf):.4f} rad in {chunk.dt} s")
    borderline = np.any(np.abs(lengths - bound) < EPS) or np.any(np.abs(angles - turn_bound) < TURN_EPS)
    return found, bool(borderline)


def turns(rotvecs: npt.NDArray[np.float64], convention: Convention) -> npt.NDArray[np.float64]:
    """The angle each step turns the tool, radians: a DELTA rotation vector's length folded
    into [0, pi]; between consecutive ABSOLUTE rotations, from the trace of the relative one."""
    if convention == Convention.DELTA:
        lengths = np.sqrt((rotvecs**2).sum(axis=1)) % (2 * math.pi)
        return np.minimum(lengths, 2 * math.pi - lengths)
    matrices = Rotation.from_rotvec(rotvecs).as_matrix()
    traces = np.einsum("nij,nij->n", matrices[:-1], matrices[1:])  # trace(A.T @ B) for each pair
    return np.arccos(np.clip((traces - 1.0) / 2.0, -1.0, 1.0))


def executable(chunk: Chunk, *, estop: bool = False) -> bool:
    """Whether the drivers' check queues `chunk`; any exception but InvalidChunk fails the test."""
    try:
        check_executable(chunk, estop=estop)
    except InvalidChunk:
        return False
    return True


@settings(max_examples=1500)
@given(chunk=chunks())
def test_a_driver_queues_a_chunk_exactly_when_it_is_within_the_limits(chunk: Chunk) -> None:
    problems, borderline = limit_problems(chunk)
    accepted = executable(chunk)
    event("queued" if accepted else "refused")
    assert not (accepted and problems), problems
    assert accepted or problems or borderline, "a chunk within every limit was refused"
    assert not executable(chunk, estop=True)


@st.composite
def steps(draw: st.DrawFn) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], float]:
    """(previous target, next target, dt): a finite step of up to 6 cm at a valid dt, or with
    one aspect broken (a non-finite coordinate, a 35 cm jump, dt of 0, NaN, a day, ...)."""
    previous = np.array(draw(st.tuples(*[st.floats(-1.0, 1.0)] * 3)))
    move = np.array(draw(st.tuples(*[st.floats(-0.035, 0.035)] * 3)))
    for array in (previous, move):
        if draw(broken):
            array[draw(st.integers(0, 2))] = draw(st.sampled_from([NAN, INF, -INF, 1e9, 0.35]))
    dt = draw(st.sampled_from(BAD_DTS) | st.floats() if draw(broken) else st.floats(LIMITS.min_dt_s, LIMITS.max_dt_s))
    return previous, previous + move, dt


@settings(max_examples=1000)
@given(step=steps())
@example(step=(np.zeros(3), np.zeros(3), 0.0))  # found here: ZeroDivisionError
@example(step=(np.zeros(3), np.zeros(3), -0.05))  # found here: passed
@example(step=(np.zeros(3), np.array([NAN, 0.0, 0.0]), 0.05))  # found here: passed
def test_a_step_passes_only_when_finite_short_and_slow_enough(
    step: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], float],
) -> None:
    here, target, dt = step
    length = float(np.sqrt(((target - here) ** 2).sum()))
    within = math.isfinite(length) and dt > 0 and length <= LIMITS.max_step_m
    within = within and length <= LIMITS.max_speed_m_s * dt
    borderline = math.isfinite(length) and abs(length - min(LIMITS.max_step_m, LIMITS.max_speed_m_s * dt)) < EPS
    reason = step_beyond_limits(here, target, dt)
    event("passed" if reason is None else "refused")
    assert (reason is None) == within or borderline, (length, dt, reason)


@st.composite
def messages(draw: st.DrawFn) -> ActionChunk:
    """An ActionChunk as any node may publish it: any enum values, any numbers, any frame."""
    chunk = draw(chunks(max_steps=400))
    n = min(len(chunk.positions), len(chunk.rotations), len(chunk.gripper))
    msg = ActionChunk(chunk_id=chunk.chunk_id, subtask_id=chunk.subtask_id, dt=chunk.dt, observation_id=1)
    msg.header.frame_id = chunk.frame_id
    msg.source, msg.convention = chunk.source, chunk.convention
    if draw(broken):  # a source or a convention no ActionChunk.*_ constant names
        setattr(msg, draw(st.sampled_from(["source", "convention"])), draw(st.sampled_from([4, 255])))
    msg.observation_stamp = Time(sec=draw(st.integers(0, 2**31 - 1)), nanosec=draw(st.integers(0, 2**32 - 1)))
    arrays = (chunk.positions, chunk.rotations, chunk.gripper)
    columns = [(a if a.ndim == 2 else a[:, None])[:n].astype(float) for a in arrays]
    msg.steps = [
        ActionStep(position=Vector3(x=p[0], y=p[1], z=p[2]), rotation=Vector3(x=r[0], y=r[1], z=r[2]), gripper=g[0])
        for p, r, g in zip(*(np.pad(c, ((0, 0), (0, 3 - c.shape[1]))) for c in columns), strict=True)
    ]
    return msg


def _fields_refused(msg: ActionChunk) -> bool:
    try:
        message_checks.check_fields(msg, message_checks.limits_for(ActionChunk))
    except InvalidMessage:
        return True
    return False


@settings(max_examples=1000)
@given(msg=messages())
def test_a_message_converts_or_is_refused_as_an_invalid_chunk(msg: ActionChunk) -> None:
    try:
        chunk = convert.chunk_from_msg(msg)
    except InvalidChunk as exc:
        event("not converted")
        # Only an unknown enum or a field that is not sane (NaN, an invalid stamp: message_checks).
        unknown = msg.source not in list(ChunkSource) or msg.convention not in list(Convention)
        assert unknown or _fields_refused(msg), exc
        return
    problems, _ = limit_problems(chunk)
    accepted = executable(chunk)
    event("queued" if accepted else "refused")
    assert not (accepted and problems), problems
