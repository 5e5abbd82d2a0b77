"""Property-based fuzz (Hypothesis) of the shield's gate (issue 19): chunks of 0 to 10,000
steps, dt of 0, negative, NaN, infinite or a day, non-finite or huge numbers, jumps, both
conventions, wrong frames, mismatched array lengths and stale, future or NaN observation
stamps. Whatever the filter behind the gate would release, and whatever the geometric
filter itself makes of a chunk (a prefix, a retreat), no chunk beyond the MotionLimits
(restated independently below) is ever released."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation
from shield_fixtures import DOWN_ROTVEC, make_shield, obstacles_at, state_at

from carryon_common.core.chunk import Chunk, ChunkSource, Convention
from carryon_common.core.driver import LIMITS
from carryon_shield.core.filter import GeometricShield
from carryon_shield.core.gate import ChunkFilter, Decision, ShieldDecision, ShieldGate

NAN, INF = math.nan, math.inf
# Infinities and 1e300 overflow and subtract to NaN on purpose: numpy's warnings say nothing here.
pytestmark = pytest.mark.filterwarnings("ignore:(overflow|invalid value) encountered:RuntimeWarning")
NOW_S, MAX_AGE_S = 100.0, 0.5
START = np.array([0.5, 0.0, 0.6])  # where the arm is
BAD_NUMBERS = [NAN, INF, -INF, 1e9, -1e9, 1e300]
BAD_DTS = [0.0, -0.05, NAN, INF, -INF, 1e9, 1e-9, 0.0049, 0.51]
# Valid dt, with the fast rates (a retreat is made with the chunk's dt) as likely as the usual ones.
DTS = st.sampled_from([LIMITS.min_dt_s, 0.008, 0.01, 0.02, 0.05, LIMITS.max_dt_s]) | st.floats(0.005, 0.5)
STAMPS = [NOW_S, NOW_S - 0.1, NOW_S + 0.1, NOW_S - MAX_AGE_S, NOW_S - 10.0, NOW_S + 10.0, NAN, INF, -INF]
broken = st.sampled_from([False, False, False, True])  # each aspect of a chunk is broken one time in four
EPS = 1e-12  # metres: what separates "within" from "beyond" a limit when two checks round differently
TURN_EPS = 1e-6  # radians: the same for turns (a huge rotation vector loses digits when folded)
# Obstacle points: beside the fingers (the first step is blocked: a retreat), in the way of a
# chunk towards -y (a prefix), far away (all released).
SCENES = {"beside": [[0.5, -0.062, 0.59]], "ahead": [[0.5, -0.12, 0.59]], "far": [[0.9, 0.5, 1.1]]}


@st.composite
def chunks(draw: st.DrawFn, broken: st.SearchStrategy[bool] = broken) -> Chunk:
    """A chunk from the arm's pose, each aspect within the limits or broken when `broken` says."""
    n = draw(st.integers(0, 10_000) | st.sampled_from([0, 201]) if draw(broken) else st.integers(1, LIMITS.max_steps))
    dt = draw(st.sampled_from(BAD_DTS) | st.floats() if draw(broken) else DTS)
    bound = min(LIMITS.max_step_m, LIMITS.max_speed_m_s * dt) if math.isfinite(dt) and dt > 0 else LIMITS.max_step_m
    length = bound * draw(st.floats(1.0, 10.0, exclude_min=True) if draw(broken) else st.floats(0.0, 1.0))
    direction = np.array(draw(st.sampled_from([(0.0, -1.0, 0.0), (0.0, 0.6, 0.8), (1.0, 0.0, 0.0)])))
    convention = draw(st.sampled_from(Convention))
    moves = np.tile(length * direction, (n, 1))
    arrays = {
        "positions": moves if convention == Convention.DELTA else START + np.cumsum(moves, axis=0),
        "rotations": np.zeros((n, 3)) if convention == Convention.DELTA else np.tile(DOWN_ROTVEC, (n, 1)),
        "gripper": np.full(n, draw(st.floats(0.0, 1.0))),
    }
    if n and draw(broken):
        name = draw(st.sampled_from(sorted(arrays)))
        index = (draw(st.integers(0, n - 1)),) + (() if name == "gripper" else (draw(st.integers(0, 2)),))
        arrays[name][index] = draw(st.sampled_from([*BAD_NUMBERS, -0.1, 1.1] if name == "gripper" else BAD_NUMBERS))
    if draw(broken):
        wrong = draw(st.sampled_from(sorted(arrays)))
        width = arrays[wrong].shape[1:]
        arrays[wrong] = np.zeros(draw(st.sampled_from([(n + 1, *width), (max(0, n - 1), *width), (n, 2)])))
    return Chunk(
        chunk_id=1,
        subtask_id="s1",
        source=draw(st.sampled_from(ChunkSource)),
        convention=convention,
        frame_id=draw(st.sampled_from(["", "panda_link0", "World", "world\x00"]) if draw(broken) else st.just("world")),
        dt=dt,
        observation_id=1,
        observation_stamp_s=draw(st.sampled_from(STAMPS) if draw(broken) else st.floats(NOW_S - 0.4, NOW_S + 0.4)),
        **arrays,
    )


def beyond_limits(chunk: Chunk, previous: npt.NDArray[np.float64] | None = None) -> tuple[list[str], bool]:
    """Why `chunk` must not be released (the MotionLimits and Chunk.validate restated: steps,
    dt, step length and speed, finite numbers, shapes, a fresh observation; with `previous`,
    the first ABSOLUTE step from there too), and whether a step sits within EPS of a limit."""
    p, r, g, n = chunk.positions, chunk.rotations, chunk.gripper, chunk.positions.shape[0]
    if n == 0 or p.shape != (n, 3) or r.shape != (n, 3) or g.shape != (n,):
        return [f"shapes {p.shape} {r.shape} {g.shape}"], False
    if not all(np.isfinite(a).all() for a in (p, r, g)) or not math.isfinite(chunk.dt):
        return ["non-finite numbers"], False
    found = [] if abs(NOW_S - chunk.observation_stamp_s) <= MAX_AGE_S else ["no fresh observation"]
    found += [] if chunk.frame_id else ["no frame"]
    found += [f"{n} steps"] if n > LIMITS.max_steps else []
    found += [f"dt {chunk.dt}"] if not LIMITS.min_dt_s <= chunk.dt <= LIMITS.max_dt_s else []
    found += ["gripper outside [0, 1]"] if g.min() < 0.0 or g.max() > 1.0 else []
    if chunk.convention == Convention.DELTA:
        moves = p
    else:
        moves = np.diff(p if previous is None else np.vstack([previous, p]), axis=0)
    lengths = np.sqrt((moves**2).sum(axis=1))
    bound = min(LIMITS.max_step_m, LIMITS.max_speed_m_s * chunk.dt) if chunk.dt > 0 else 0.0
    found += [f"a step of {lengths.max():.4f} m in {chunk.dt} s"] if np.any(lengths > bound) else []
    spans = np.sqrt((r**2).sum(axis=1))
    if np.any(spans > 2 * math.pi):  # refused whatever else holds: no rotation needs more than a full turn
        found = [*found, "a rotation vector longer than a full turn"]
        return found, bool(np.any(np.abs(spans - 2 * math.pi) < TURN_EPS))
    angles = turns(r, chunk.convention)
    turn_bound = min(LIMITS.max_turn_rad, LIMITS.max_turn_speed_rad_s * chunk.dt) if chunk.dt > 0 else 0.0
    found += [f"a turn of {angles.max():.4f} rad in {chunk.dt} s"] if np.any(angles > turn_bound) else []
    return found, bool(np.any(np.abs(lengths - bound) < EPS) or np.any(np.abs(angles - turn_bound) < TURN_EPS))


def turns(rotvecs: npt.NDArray[np.float64], convention: Convention) -> npt.NDArray[np.float64]:
    """The angle of each step's turn between the chunk's own steps, radians (a DELTA rotation
    vector's length folded into [0, pi]; ABSOLUTE: from the relative rotation's trace)."""
    if convention == Convention.DELTA:
        lengths = np.sqrt((rotvecs**2).sum(axis=1)) % (2 * math.pi)
        return np.minimum(lengths, 2 * math.pi - lengths)
    matrices = Rotation.from_rotvec(rotvecs).as_matrix()
    traces = np.einsum("nij,nij->n", matrices[:-1], matrices[1:])
    return np.arccos(np.clip((traces - 1.0) / 2.0, -1.0, 1.0))


def release_all(chunk: Chunk, _now_s: float) -> ShieldDecision:
    """The most permissive filter there could be: the gate's own checks are all that stand."""
    return ShieldDecision(chunk.chunk_id, chunk.subtask_id, Decision.RELEASED_ALL, len(chunk), len(chunk), 0.02,
                          "clear", released=chunk)  # fmt: skip


def release_changed(change: Callable[[Chunk], Chunk]) -> ChunkFilter:
    """A filter with a bug: it releases `change(chunk)` instead of the chunk it checked."""
    return lambda chunk, now_s: dataclasses.replace(release_all(chunk, now_s), released=change(chunk))


FILTERS: dict[str, ChunkFilter] = {
    "release all": release_all,
    "ten times faster": release_changed(lambda c: dataclasses.replace(c, dt=c.dt / 10)),
    "a 35 cm last step": release_changed(lambda c: dataclasses.replace(c, positions=np.vstack([
        c.positions[:-1], c.positions[-1:] + np.array([0.0, 0.35, 0.0])]))),
    "300 times longer": release_changed(lambda c: dataclasses.replace(
        c, positions=np.tile(c.positions, (300, 1)), rotations=np.tile(c.rotations, (300, 1)),
        gripper=np.tile(c.gripper, 300))),
}  # fmt: skip


def still(dt: float = 0.05, stamp_s: float = NOW_S) -> Chunk:
    """One DELTA step that stays where the arm is."""
    return Chunk(1, "s1", ChunkSource.POLICY, Convention.DELTA, "world", dt, 1, stamp_s, np.zeros((1, 3)),
                 np.zeros((1, 3)), np.zeros(1))  # fmt: skip


@settings(max_examples=1500)
@given(chunk=chunks(), estop=broken, name=st.sampled_from(sorted(FILTERS)))
@example(chunk=still(stamp_s=NAN), estop=False, name="release all")  # found here: a NaN stamp passed as fresh
def test_the_gate_releases_no_chunk_beyond_the_limits(chunk: Chunk, estop: bool, name: str) -> None:
    """Whatever the filter behind the gate releases, even a filter with a bug."""
    gate = ShieldGate(max_observation_age_s=MAX_AGE_S, threshold_m=0.02, chunk_filter=FILTERS[name], estop_active=estop)
    decision = gate.decide(chunk, NOW_S)
    event(f"{name}: {decision.decision.name}")
    if decision.released is not None:
        problems, _ = beyond_limits(decision.released)
        assert not estop and not problems and not beyond_limits(chunk)[0], (problems, decision.reason)
    elif name == "release all" and not estop and beyond_limits(chunk) == ([], False):
        raise AssertionError(f"a chunk within every limit was not released: {decision.reason}")


@settings(max_examples=1000)
@given(chunk=chunks(broken=st.sampled_from([False] * 15 + [True])), scene=st.sampled_from(sorted(SCENES)))
@example(chunk=still(dt=LIMITS.min_dt_s), scene="beside")  # found here: a 1 cm retreat step in 5 ms (2 m/s)
def test_what_the_geometric_filter_releases_is_within_the_limits(chunk: Chunk, scene: str) -> None:
    """Prefixes and the filter's own retreats included (a retreat starts from the arm's pose),
    from the filter itself and through the gate."""
    shield: GeometricShield = make_shield(obstacles_at(SCENES[scene]), state_at(list(START)))
    through_gate = ShieldGate(max_observation_age_s=MAX_AGE_S, threshold_m=0.02, chunk_filter=shield).decide(
        chunk, NOW_S
    )
    decisions = [through_gate]
    if beyond_limits(chunk) == ([], False):  # what the gate hands the filter
        decisions.append(shield(chunk, NOW_S))
    event(through_gate.decision.name)
    for decision in decisions:
        if decision.released is not None:
            retreat = decision.decision == Decision.RETREAT
            problems, _ = beyond_limits(decision.released, previous=START if retreat else None)
            assert not problems and decision.released.frame_id == "world", (problems, decision.reason)
