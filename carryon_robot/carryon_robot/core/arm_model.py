"""The arm's collision model: spheres covering every link's collision geometry, from its URDF.

Each link's collision geometry (meshes, boxes, cylinders, capsules, spheres, as the URDF
gives them) is sampled on its surface and covered by a few spheres: k-means on the samples,
each sphere centred on its cluster and reaching its farthest sample plus a small pad, with
the fewest spheres whose reach beyond the link's convex hull stays under `max_overshoot_m`.
So every sampled point of the geometry lies inside a sphere of its link (a test checks it on
denser samples than the fit used), and a sphere never reaches far past the link.

Spheres are held in their parent joint's frame. `ArmModel.poses` places them for a batch of
joint configurations with a vectorised forward kinematics of the URDF's joint tree (revolute
and prismatic joints; fingers at a given width, other joints the arm does not command at
zero), which is what lets the shield check every link of every step of a chunk, and the
configurations between them, at control rate.

Which links the shield checks with spheres: every link that moves with a commanded joint,
except `hand_links` (the robot description's links the shield models exactly as the hand,
where permitted contacts apply). Links fixed to the base are mounted: nothing checks them.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pinocchio as pin

from carryon_common.core.errors import ConfigError
from carryon_robot.core.kinematics import IkSolution

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

SAMPLE_SPACING_M = 0.01  # surface samples the spheres are fitted to
PAD_M = 0.003  # added to every radius: points between the samples
MAX_OVERSHOOT_M = 0.02  # how far a sphere may reach beyond its link's surface (plus PAD_M)
MIN_GAIN = 0.01  # a sphere covering fewer new samples than this share is not added: the nearest one grows


@dataclass(frozen=True)
class LinkSpheres:
    """One link's spheres (S, 4) (x, y, z, r) in the frame of the joint that moves it, and
    `surface` (N, 3): the samples of its geometry they were fitted to (same frame)."""

    link: str
    joint: int  # the pinocchio joint id (0: fixed to the base)
    spheres: FloatArray
    surface: FloatArray

    @functools.cached_property
    def hull(self) -> FloatArray:
        """The convex hull of the geometry as facet planes (F, 4): n.x + d <= 0 inside."""
        from scipy.spatial import ConvexHull, QhullError

        try:
            # Qhull triangulates each face: facets of one plane are one plane here
            out: FloatArray = np.unique(np.round(ConvexHull(self.surface).equations, 9), axis=0)
        except QhullError:  # flat: its bounding box
            lo, hi = self.surface.min(axis=0), self.surface.max(axis=0)
            out = np.vstack([np.column_stack([np.eye(3), -hi]), np.column_stack([-np.eye(3), lo])])
        return out


def _fibonacci_sphere(count: int) -> FloatArray:
    index = np.arange(count) + 0.5
    polar = np.arccos(1.0 - 2.0 * index / count)
    azimuth = math.pi * (1.0 + math.sqrt(5.0)) * index
    return np.column_stack([np.cos(azimuth) * np.sin(polar), np.sin(azimuth) * np.sin(polar), np.cos(polar)])


def _triangle_samples(vertices: FloatArray, triangles: IntArray, spacing_m: float) -> FloatArray:
    """Points on every triangle, about `spacing_m` apart, vertices included."""
    out = [vertices]
    for a, b, c in vertices[triangles]:
        steps = max(1, math.ceil(max(np.linalg.norm(b - a), np.linalg.norm(c - a), np.linalg.norm(c - b)) / spacing_m))
        u, v = np.meshgrid(np.arange(steps + 1), np.arange(steps + 1), indexing="ij")
        keep = u + v <= steps
        along_b, along_c = u[keep] / steps, v[keep] / steps
        out.append(a + np.outer(along_b, b - a) + np.outer(along_c, c - a))
    return np.concatenate(out)


def _primitive_samples(geometry: Any, spacing_m: float) -> FloatArray:
    """Surface samples of a URDF primitive (box, sphere, cylinder, capsule) in its own frame."""
    import coal

    def ring(radius: float, z: float) -> FloatArray:
        count = max(8, math.ceil(2 * math.pi * radius / spacing_m))
        angle = np.linspace(0.0, 2 * math.pi, count, endpoint=False)
        return np.column_stack([radius * np.cos(angle), radius * np.sin(angle), np.full(count, z)])

    if isinstance(geometry, coal.Box):
        half_side = np.asarray(geometry.halfSide, dtype=np.float64)
        axes = [np.linspace(-h, h, max(2, math.ceil(2 * h / spacing_m) + 1)) for h in half_side]
        grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)
        on_face = np.any(np.isclose(np.abs(grid), half_side), axis=1)
        out: FloatArray = grid[on_face]
        return out
    if isinstance(geometry, coal.Sphere):
        r = float(geometry.radius)
        return r * _fibonacci_sphere(max(32, math.ceil(4 * math.pi * r * r / spacing_m**2)))
    if isinstance(geometry, (coal.Cylinder, coal.Capsule)):
        r, half = float(geometry.radius), float(geometry.halfLength)
        levels = np.linspace(-half, half, max(2, math.ceil(2 * half / spacing_m) + 1))
        points = [ring(r, z) for z in levels]
        if isinstance(geometry, coal.Capsule):
            cap = r * _fibonacci_sphere(max(32, math.ceil(4 * math.pi * r * r / spacing_m**2)))
            points += [cap + np.array([0.0, 0.0, half]), cap - np.array([0.0, 0.0, half])]
        else:
            for z in (-half, half):
                points += [ring(rho, z) for rho in np.linspace(0.0, r, max(2, math.ceil(r / spacing_m) + 1))]
        return np.concatenate(points)
    raise ConfigError(f"collision geometry {type(geometry).__name__} is not supported (mesh or URDF primitive)")


def geometry_samples(geometry: Any, spacing_m: float = SAMPLE_SPACING_M) -> FloatArray:
    """Surface samples (N, 3) of one collision geometry, in its own frame."""
    if hasattr(geometry, "num_tris") and hasattr(geometry, "vertices"):  # a mesh (coal BVH model)
        vertices = np.asarray(geometry.vertices(), dtype=np.float64).reshape(-1, 3)
        corners = [geometry.tri_indices(i) for i in range(int(geometry.num_tris))]
        triangles = np.array([[t[0], t[1], t[2]] for t in corners], dtype=np.int64).reshape(-1, 3)
        samples = _triangle_samples(vertices, triangles, spacing_m)
        # one sample per quarter-spacing voxel (triangles share their edges), each a true surface point
        _keys, first = np.unique(np.floor(samples / (0.25 * spacing_m)).astype(np.int64), axis=0, return_index=True)
        out: FloatArray = samples[np.sort(first)]
        return out
    return _primitive_samples(geometry, spacing_m)


def _volume_samples(points: FloatArray, equations: FloatArray, spacing_m: float) -> FloatArray:
    """Grid points (M, 3) inside the convex hull (facet planes n.x + d <= 0) of `points`."""
    lo, hi = points.min(axis=0), points.max(axis=0)
    axes = [np.arange(lo[a], hi[a] + 0.5 * spacing_m, spacing_m) for a in range(3)]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)
    inside = grid[np.all(grid @ equations[:, :3].T + equations[:, 3] <= 1e-9, axis=1)]
    return inside if len(inside) else points


def fit_spheres(
    points: FloatArray,
    *,
    max_overshoot_m: float = MAX_OVERSHOOT_M,
    pad_m: float = PAD_M,
    spacing_m: float = SAMPLE_SPACING_M,
    min_gain: float = MIN_GAIN,
) -> FloatArray:
    """Spheres (S, 4) containing every point (N, 3) of a surface, reaching at most about
    `max_overshoot_m` + `pad_m` beyond it.

    A greedy set cover with inner spheres: every grid point inside the surface's convex hull
    is a candidate centre whose radius is its distance to the nearest surface point plus
    `max_overshoot_m`; the candidate covering the most surface points not yet covered is
    taken, until every point is covered (a point no candidate reaches gets a sphere of its
    own). Each sphere then grows by `pad_m` for the surface between the samples. The fewer
    the spheres, the larger `max_overshoot_m`. Deterministic."""
    from scipy.spatial import ConvexHull, QhullError, cKDTree

    points = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    if len(points) == 0:
        raise ConfigError("no points to fit spheres to")
    try:
        equations = ConvexHull(points).equations
        candidates = _volume_samples(points, equations, spacing_m)
    except QhullError:  # flat or degenerate geometry (a plate): centres on the surface itself
        candidates = points
    every_point = points
    # the cover is chosen on one surface sample per half-spacing voxel; every sample counts at the end
    _keys, first = np.unique(np.floor(points / (0.5 * spacing_m)).astype(np.int64), axis=0, return_index=True)
    points = points[np.sort(first)]
    surface = cKDTree(points)
    radius: FloatArray = np.asarray(surface.query(candidates)[0], dtype=np.float64) + max_overshoot_m
    covers = np.zeros((len(candidates), len(points)), dtype=np.float32)
    for index, members in enumerate(surface.query_ball_point(candidates, radius)):
        covers[index, members] = 1.0
    uncovered = np.ones(len(points), dtype=bool)
    chosen: list[list[float]] = []
    while uncovered.any():
        gain = covers @ uncovered.astype(np.float32)
        best = int(np.argmax(gain))
        if gain[best] < min_gain * len(points) and chosen:
            break  # the last few points (edges, corners): the nearest sphere grows to them
        chosen.append([*candidates[best], float(radius[best])])
        uncovered &= covers[best] == 0.0
    spheres = np.asarray(chosen)
    outside = np.linalg.norm(every_point[:, None, :] - spheres[None, :, :3], axis=2) - spheres[None, :, 3]
    left = every_point[~np.any(outside <= 0.0, axis=1)]
    if len(left):
        nearest = np.argmin(
            np.linalg.norm(left[:, None, :] - spheres[None, :, :3], axis=2) - spheres[None, :, 3], axis=1
        )
        for index in np.unique(nearest):
            reach = np.linalg.norm(left[nearest == index] - spheres[index, :3], axis=1).max()
            spheres[index, 3] = max(spheres[index, 3], float(reach))
    spheres[:, 3] += pad_m
    return spheres


@dataclass(frozen=True)
class _Joint:
    parent: int
    placement: FloatArray  # (4, 4) in the parent joint's frame at q = 0
    axis: FloatArray  # (3,) unit, in the joint's frame
    revolute: bool


class ArmModel:
    """The arm's links as spheres, placed for batches of joint configurations.

    `q` arrays hold the commanded joints in `joint_names` order (radians / metres); the
    gripper joints sit at half the finger width each; other joints at zero. Poses are in
    `world` (the URDF base placed by `base`, a pin.SE3)."""

    def __init__(
        self,
        urdf: Path,
        joint_names: Sequence[str],
        base: pin.SE3,
        *,
        tool_frame: str,
        tcp: pin.SE3,
        gripper_joints: Sequence[str] = (),
        hand_links: Sequence[str] = (),
        max_overshoot_m: float = MAX_OVERSHOOT_M,
    ) -> None:
        model, geometry = _load_with_geometry(urdf)
        if not model.existFrame(tool_frame):
            raise ConfigError(f"tool frame {tool_frame!r} is not in {urdf.name}")
        frame = model.frames[model.getFrameId(tool_frame)]
        self._tool_joint = int(frame.parentJoint)
        self._tool_in_joint = (frame.placement * tcp).homogeneous
        self.joint_names = tuple(joint_names)
        known = {model.names[j]: j for j in range(1, model.njoints)}
        missing = [name for name in (*joint_names, *gripper_joints) if name not in known]
        if missing:
            raise ConfigError(f"joints {missing} are not in {urdf.name}; its joints: {sorted(known)}")
        self._base = base.homogeneous
        self._joints = [_joint_of(model, j) for j in range(1, model.njoints)]
        # column of each pinocchio joint (1..) in the q arrays: commanded, gripper (-1), or fixed at 0 (-2)
        source = np.full(model.njoints, -2, dtype=np.int64)
        for column, name in enumerate(joint_names):
            source[known[name]] = column
        for name in gripper_joints:
            source[known[name]] = -1
        self._source = source
        by_link: dict[str, tuple[int, list[FloatArray]]] = {}
        for obj in geometry.geometryObjects:
            link = model.frames[obj.parentFrame].name
            local = geometry_samples(obj.geometry)  # pinocchio's mesh loader has applied the URDF's scale
            placed = (obj.placement.homogeneous @ np.column_stack([local, np.ones(len(local))]).T).T[:, :3]
            joint = int(obj.parentJoint)
            by_link.setdefault(link, (joint, []))[1].append(placed)
        if not by_link:
            raise ConfigError(f"{urdf.name} has no collision geometry: the shield cannot check the arm's links")
        unknown_hand = sorted(set(hand_links) - set(by_link))
        if unknown_hand:
            raise ConfigError(f"hand_links {unknown_hand} have no collision geometry in {urdf.name}: {sorted(by_link)}")
        self.links = tuple(
            LinkSpheres(
                link, joint, fit_spheres(np.concatenate(parts), max_overshoot_m=max_overshoot_m), np.concatenate(parts)
            )
            for link, (joint, parts) in by_link.items()
        )
        self.hand_links = tuple(hand_links)
        moved = {j for j in range(1, model.njoints) if self._moved_by_command(j)}
        self.moving = tuple(i for i, link in enumerate(self.links) if link.joint in moved)
        self.checked = tuple(i for i in self.moving if self.links[i].link not in hand_links)
        self._model = model
        commanded = [known[name] for name in joint_names]
        self.lower = np.array([model.lowerPositionLimit[model.joints[j].idx_q] for j in commanded])
        self.upper = np.array([model.upperPositionLimit[model.joints[j].idx_q] for j in commanded])
        # the tree as arrays for the compiled kinematics (core/chain_ik.py)
        self._columns = np.array(commanded, dtype=np.int64)
        self._parent = np.array([joint.parent for joint in self._joints], dtype=np.int64)
        self._placement = np.ascontiguousarray([joint.placement for joint in self._joints])
        self._axis = np.ascontiguousarray([joint.axis for joint in self._joints], dtype=np.float64)
        self._revolute = np.array([joint.revolute for joint in self._joints], dtype=np.bool_)

    def _moved_by_command(self, joint: int) -> bool:
        while joint > 0:
            if self._source[joint] >= 0:
                return True
            joint = self._joints[joint - 1].parent
        return False

    # -- the spheres the shield checks, flattened --------------------------------------------
    def _flatten(self, indices: Sequence[int]) -> tuple[FloatArray, IntArray, IntArray]:
        if not indices:
            return np.zeros((0, 4)), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        spheres = np.concatenate([self.links[i].spheres for i in indices])
        joints = np.concatenate([np.full(len(self.links[i].spheres), self.links[i].joint) for i in indices])
        owner = np.concatenate([np.full(len(self.links[i].spheres), i) for i in indices])
        return spheres, joints.astype(np.int64), owner.astype(np.int64)

    @functools.cached_property
    def checked_spheres(self) -> tuple[FloatArray, IntArray, IntArray]:
        """(spheres (S, 4) in their joint frames, joint id (S,), link index (S,)) of the checked links."""
        return self._flatten(self.checked)

    @functools.cached_property
    def moving_spheres(self) -> tuple[FloatArray, IntArray, IntArray]:
        """The same for every link a commanded joint moves, the hand's included (how far a motion goes)."""
        return self._flatten(self.moving)

    @functools.cached_property
    def all_spheres(self) -> tuple[FloatArray, IntArray, IntArray]:
        """The same for every link, those fixed to the base included (the robot's whole volume)."""
        return self._flatten(tuple(range(len(self.links))))

    @functools.cached_property
    def hulls(self) -> tuple[FloatArray, IntArray]:
        """Every link's hull planes stacked (F, 4) and where each link's start (L + 1,)."""
        planes = [link.hull for link in self.links]
        return np.concatenate(planes), np.concatenate([[0], np.cumsum([len(p) for p in planes])]).astype(np.int64)

    @functools.cached_property
    def self_collision_pairs(self) -> tuple[tuple[int, int], ...]:
        """Pairs of links (indices into `links`) checked against each other: every pair the
        joints can bring together, much as MoveIt's setup assistant decides it. Left out are
        pairs whose links hang on joints at most two apart (the spheres are generous: a wrist
        turn would bring link 5's near link 7's, the joint limits keep the links apart), pairs
        whose spheres overlap at the middle of the joint ranges (touching by design: the spheres are generous) and pairs
        that overlap in nearly every (>= 95 %) or no one of 2000 random configurations
        within the joint limits (seeded: the same pairs every time)."""
        rng = np.random.default_rng(0)
        q = np.vstack([0.5 * (self.lower + self.upper), rng.uniform(self.lower, self.upper, (2000, len(self.lower)))])
        spheres, joints, owner = self.all_spheres
        poses = self.joint_poses(q, 0.04)[:, joints]
        centres = np.einsum("nsij,sj->nsi", poses[..., :3, :3], spheres[:, :3]) + poses[..., :3, 3]
        pairs = []
        for a in range(len(self.links)):
            for b in range(a + 1, len(self.links)):
                if self._joint_distance(self.links[a].joint, self.links[b].joint) <= 2:
                    continue
                ia, ib = np.flatnonzero(owner == a), np.flatnonzero(owner == b)
                gap = np.linalg.norm(centres[:, ia, None] - centres[:, None, ib], axis=3) - (
                    spheres[ia, 3][:, None] + spheres[ib, 3][None]
                )
                touching = (gap < 0.0).any(axis=(1, 2))
                if touching[0] or touching[1:].mean() >= 0.95 or not touching[1:].any():
                    continue
                pairs.append((a, b))
        return tuple(pairs)

    def _joint_distance(self, a: int, b: int) -> int:
        """Joints between two joints in the tree (0: the same joint)."""

        def chain(joint: int) -> list[int]:
            out = [joint]
            while joint > 0:
                joint = self._joints[joint - 1].parent
                out.append(joint)
            return out

        up_a, up_b = chain(a), chain(b)
        common = next(j for j in up_a if j in up_b)
        return up_a.index(common) + up_b.index(common)

    @functools.cached_property
    def _self_pairs_flat(self) -> tuple[IntArray, IntArray, IntArray]:
        """Every sphere pair of the self-collision pairs: (first, second, link pair index)."""
        _spheres, _joints, owner = self.all_spheres
        first, second, label = [], [], []
        for index, (a, b) in enumerate(self.self_collision_pairs):
            ia, ib = np.flatnonzero(owner == a), np.flatnonzero(owner == b)
            first.append(np.repeat(ia, len(ib)))
            second.append(np.tile(ib, len(ia)))
            label.append(np.full(len(ia) * len(ib), index))
        if not first:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        return (
            np.concatenate(first).astype(np.int64),
            np.concatenate(second).astype(np.int64),
            np.concatenate(label).astype(np.int64),
        )

    def self_collisions(self, q: FloatArray, finger_width_m: float = 0.0) -> IntArray:
        """For n configurations (n, dof): a self-collision pair (index into
        `self_collision_pairs`) whose spheres overlap, -1 where none does."""
        from carryon_robot.core.chain_ik import first_overlap, place_points

        spheres, joints, _owner = self.all_spheres
        first, second, label = self._self_pairs_flat
        centres = place_points(self.joint_poses(q, finger_width_m), joints, np.ascontiguousarray(spheres[:, :3]))
        return first_overlap(centres, np.ascontiguousarray(spheres[:, 3]), first, second, label)

    def joint_poses(self, q: FloatArray, finger_width_m: float = 0.0) -> FloatArray:
        """(n, J + 1, 4, 4): every joint's frame in `world` for n configurations (n, dof);
        index 0 is the URDF base (compiled: `core/chain_ik.py`)."""
        from carryon_robot.core.chain_ik import chain_fk_batch

        q = np.atleast_2d(np.asarray(q, dtype=np.float64))
        values = np.tile(self._fixed(finger_width_m), (len(q), 1))
        values[:, self._columns - 1] = q
        return chain_fk_batch(values, self._parent, self._placement, self._axis, self._revolute, self._base)

    def inverse(
        self, q_seed: FloatArray, position: FloatArray, rotation: FloatArray, finger_width_m: float = 0.0
    ) -> IkSolution:
        """Joints that put the tool centre point at the `world` pose: the drivers' damped
        least-squares IK, compiled (`core/chain_ik.py`)."""
        q, position_errors, rotation_errors, iterations = self.inverse_path(
            q_seed, np.asarray(position)[None], np.asarray(rotation)[None], finger_width_m
        )
        return IkSolution(q[0], float(position_errors[0]), float(rotation_errors[0]), int(iterations[0]))

    def inverse_path(
        self, q_start: FloatArray, positions: FloatArray, rotations: FloatArray, finger_width_m: float = 0.0
    ) -> tuple[FloatArray, FloatArray, FloatArray, IntArray]:
        """`inverse` for a sequence of tool targets (m, 3) / (m, 3, 3), each seeded from the
        previous solution: joints (m, dof), position errors (m,), rotation errors (m,) and the
        iterations each took (m,); 50 at most, to 0.1 mm and 1 mrad, as the drivers' IK."""
        from carryon_robot.core.chain_ik import chain_ik_path

        targets = np.tile(np.eye(4), (len(positions), 1, 1))
        targets[:, :3, :3], targets[:, :3, 3] = rotations, positions
        return chain_ik_path(
            np.asarray(q_start, dtype=np.float64),
            self._columns,
            self._fixed(finger_width_m),
            self._parent,
            self._placement,
            self._axis,
            self._revolute,
            self._base,
            self._tool_joint,
            self._tool_in_joint,
            targets,
            self.lower,
            self.upper,
            1e-4,
            50,
            1e-4,
            1e-3,
        )

    def _fixed(self, finger_width_m: float) -> FloatArray:
        return np.where(self._source[1:] == -1, 0.5 * finger_width_m, 0.0)

    def tool_poses(self, q: FloatArray, finger_width_m: float = 0.0) -> tuple[FloatArray, FloatArray]:
        """Tool centre point positions (n, 3) and rotations (n, 3, 3) in `world`."""
        pose = self.joint_poses(q, finger_width_m)[:, self._tool_joint] @ self._tool_in_joint
        return pose[:, :3, 3].copy(), pose[:, :3, :3].copy()

    def sphere_centres(self, q: FloatArray, finger_width_m: float = 0.0, *, moving: bool = False) -> FloatArray:
        """(n, S, 3): the centres in `world` of the checked spheres (radii: `checked_spheres`),
        or with `moving` of every moving link's (`moving_spheres`)."""
        from carryon_robot.core.chain_ik import place_points

        spheres, joints, _owner = self.moving_spheres if moving else self.checked_spheres
        return place_points(self.joint_poses(q, finger_width_m), joints, np.ascontiguousarray(spheres[:, :3]))

    def link_spheres_world(self, q: FloatArray, finger_width_m: float = 0.0) -> dict[str, FloatArray]:
        """Every link's spheres (S, 4) in `world` at one configuration (markers, tests)."""
        poses = self.joint_poses(np.asarray(q)[None], finger_width_m)[0]
        out = {}
        for link in self.links:
            pose = poses[link.joint]
            out[link.link] = np.column_stack([link.spheres[:, :3] @ pose[:3, :3].T + pose[:3, 3], link.spheres[:, 3]])
        return out


def _joint_of(model: pin.Model, joint: int) -> _Joint:
    """A joint's parent, placement and axis, read from how pinocchio moves it (any revolute
    or prismatic joint type, aligned or not)."""
    if model.joints[joint].nq != 1 or model.joints[joint].nv != 1:
        raise ConfigError(
            f"joint {model.names[joint]!r} ({model.joints[joint].shortname()}) is not a revolute or prismatic "
            "joint: the arm model supports those only"
        )
    data = model.createData()
    q = pin.neutral(model)
    q[model.joints[joint].idx_q] = 1.0
    pin.forwardKinematics(model, data, q)
    motion = model.jointPlacements[joint].inverse() * data.liMi[joint]
    angle = pin.log3(motion.rotation)
    revolute = bool(np.linalg.norm(angle) > 1e-9)
    axis = angle if revolute else motion.translation
    if abs(np.linalg.norm(axis) - 1.0) > 1e-6:
        raise ConfigError(f"joint {model.names[joint]!r}: its motion is not a unit revolution or translation")
    return _Joint(int(model.parents[joint]), model.jointPlacements[joint].homogeneous, np.asarray(axis), revolute)


def _package_dirs(urdf: Path) -> list[str]:
    """Where `package://` paths of the URDF may resolve: its ancestor folders, then the share
    folders of the ROS environment (AMENT_PREFIX_PATH)."""
    dirs = [str(parent) for parent in list(urdf.resolve().parents)[:4]]
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        if prefix:
            dirs.append(str(Path(prefix) / "share"))
    return dirs


def _load_with_geometry(urdf: Path) -> tuple[pin.Model, pin.GeometryModel]:
    if not urdf.is_file():
        raise ConfigError(f"URDF {urdf} does not exist")
    try:
        model, geometry = pin.buildModelsFromUrdf(
            str(urdf), package_dirs=_package_dirs(urdf), geometry_types=[pin.GeometryType.COLLISION]
        )
    except (RuntimeError, ValueError, OSError) as exc:
        raise ConfigError(f"cannot read the collision geometry of {urdf}: {exc}") from exc
    return model, geometry
