"""The robot self-filter: which camera points lie on the robot, from its URDF and joint states.

The robot's collision geometry (the URDF's `<collision>` meshes and primitives, read with
Pinocchio) is sampled once into surface points in each geometry's own frame, about
`spacing_m` apart (the tool end denser, see `RobotSelfFilter`). For a joint configuration
those points are posed with Pinocchio's forward kinematics and the URDF base pose in `world`
(`RobotDescription.base_xyz` / `base_rpy`); a camera point is the robot's when it lies within
`margin_m` of them (`tool_margin_m` at the tool end). Each finger is posed from its own joint
position when joint_states carries it: a gripper whose fingers move independently (the
simulated one) is not symmetric about the hand after an off-centre grasp, and a finger
posed from the width alone can be centimetres from the real one. Only the robot model and
its joint states are used, never a simulator's ground truth, so the same filter runs on
the real arm.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pinocchio as pin
from scipy.spatial import cKDTree

from carryon_common.core.errors import CarryOnError, ConfigError
from carryon_robot.core.kinematics import RobotDescription, default_urdf, transform

coal = pin.coal  # Pinocchio's collision library (its geometry types), typed like pinocchio

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

DEFAULT_MARGIN_M = 0.02
DEFAULT_TOOL_MARGIN_M = 0.012
DEFAULT_SPACING_M = 0.008
TOOL_SAMPLES_PER_MARGIN = 2.0  # the tool end is sampled at most tool_margin_m / this apart


class MissingJoints(CarryOnError, KeyError):
    """Joint positions were asked for a configuration that lacks some of the arm's joints."""

    def __init__(self, missing: Sequence[str], given: Sequence[str]) -> None:
        self.missing = tuple(missing)
        super().__init__(f"robot self-filter: no position for arm joints {list(self.missing)} (given: {sorted(given)})")

    def __str__(self) -> str:  # KeyError would wrap the message in quotes
        return str(self.args[0])


# -- surface sampling (pure numpy) --------------------------------------------------------


def sample_triangles(
    vertices: FloatArray, triangles: npt.NDArray[np.int64], spacing_m: float, rng: np.random.Generator
) -> FloatArray:
    """Points (P, 3) on a triangle mesh's surface, in the vertices' frame, about `spacing_m` apart.

    `vertices` (V, 3) metres, `triangles` (T, 3) vertex indices. Each triangle gets
    area / spacing² points on average (the fraction drawn at random, so small triangles
    are sampled in proportion to their area), each uniform over the triangle."""
    corners = vertices[triangles]  # (T, 3, 3)
    edge1, edge2 = corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]
    areas = 0.5 * np.linalg.norm(np.cross(edge1, edge2), axis=1)
    expected = areas / spacing_m**2
    counts = np.floor(expected + rng.random(len(expected))).astype(np.int64)
    owner = np.repeat(np.arange(len(triangles)), counts)
    u, v = rng.random(len(owner)), rng.random(len(owner))
    flip = u + v > 1.0  # fold the unit square onto the triangle
    u[flip], v[flip] = 1.0 - u[flip], 1.0 - v[flip]
    out: FloatArray = corners[owner, 0] + u[:, None] * edge1[owner] + v[:, None] * edge2[owner]
    return out


def _count(area_m2: float, spacing_m: float) -> int:
    return max(1, round(area_m2 / spacing_m**2))


def _on_sphere(count: int, radius: float, rng: np.random.Generator) -> FloatArray:
    directions = rng.normal(size=(count, 3))
    out: FloatArray = radius * directions / np.linalg.norm(directions, axis=1, keepdims=True)
    return out


def _on_cylinder_side(radius: float, half_length: float, spacing_m: float, rng: np.random.Generator) -> FloatArray:
    count = _count(2.0 * np.pi * radius * 2.0 * half_length, spacing_m)
    angle = rng.uniform(0.0, 2.0 * np.pi, count)
    z = rng.uniform(-half_length, half_length, count)
    return np.stack([radius * np.cos(angle), radius * np.sin(angle), z], axis=1)


def _on_disc(radius: float, z: float, spacing_m: float, rng: np.random.Generator) -> FloatArray:
    count = _count(np.pi * radius**2, spacing_m)
    r, angle = radius * np.sqrt(rng.random(count)), rng.uniform(0.0, 2.0 * np.pi, count)
    return np.stack([r * np.cos(angle), r * np.sin(angle), np.full(count, z)], axis=1)


def _box_mesh(half: FloatArray) -> tuple[FloatArray, npt.NDArray[np.int64]]:
    signs = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], dtype=np.float64)
    # corner index = 4 * (x > 0) + 2 * (y > 0) + (z > 0); two triangles per face
    faces = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
    triangles = [tri for a, b, c, d in faces for tri in ((a, b, c), (a, c, d))]
    return signs * half, np.array(triangles, dtype=np.int64)


def sample_geometry(geometry: object, spacing_m: float, rng: np.random.Generator, name: str) -> FloatArray:
    """Surface points (P, 3) of one coal collision geometry, in its own frame, metres.

    Meshes (`BVHModel`, as Pinocchio loads STL / DAE / OBJ files, already scaled) and the
    URDF primitives (box, sphere, cylinder; capsules too) are supported; anything else
    raises `ConfigError` naming the geometry."""
    if isinstance(geometry, coal.BVHModelBase):
        vertices = np.asarray(geometry.vertices(), dtype=np.float64).reshape(-1, 3)
        triangles = np.array(
            [[t[0], t[1], t[2]] for t in (geometry.tri_indices(i) for i in range(geometry.num_tris))],
            dtype=np.int64,
        ).reshape(-1, 3)
        return sample_triangles(vertices, triangles, spacing_m, rng)
    if isinstance(geometry, coal.Box):
        return sample_triangles(*_box_mesh(np.asarray(geometry.halfSide, dtype=np.float64)), spacing_m, rng)
    if isinstance(geometry, coal.Sphere):
        radius = float(geometry.radius)
        return _on_sphere(_count(4.0 * np.pi * radius**2, spacing_m), radius, rng)
    if isinstance(geometry, coal.Cylinder):
        radius, half = float(geometry.radius), float(geometry.halfLength)
        parts = [_on_cylinder_side(radius, half, spacing_m, rng)]
        parts += [_on_disc(radius, z, spacing_m, rng) for z in (-half, half)]
        return np.concatenate(parts)
    if isinstance(geometry, coal.Capsule):
        radius, half = float(geometry.radius), float(geometry.halfLength)
        ends = _on_sphere(_count(4.0 * np.pi * radius**2, spacing_m), radius, rng)
        ends[:, 2] += np.where(ends[:, 2] >= 0.0, half, -half)
        return np.concatenate([_on_cylinder_side(radius, half, spacing_m, rng), ends])
    raise ConfigError(
        f"robot self-filter: collision geometry {name!r} is a {type(geometry).__name__}; "
        "supported: meshes, boxes, spheres, cylinders, capsules"
    )


# -- the filter -----------------------------------------------------------------------------


class RobotSelfFilter:
    """Masks the camera points that lie on the robot, for given joint positions.

    Built once from a `RobotDescription` (URDF, arm and finger joint names, open gripper
    width, base pose in `world`); `spacing_m` is the distance between surface samples and
    `margin_m` how far from the sampled surface a point still counts as the robot's
    (metres); `tool_margin_m` the same for the tool end (the link of `tool_frame` and the
    fingers), tighter so that an object next to the fingers stays visible. The tool end is
    sampled at most `tool_margin_m / 2` apart (`TOOL_SAMPLES_PER_MARGIN`), so a tight margin
    still covers its whole surface: a point of the surface has no sample within the margin
    with a chance of about exp(-4 pi), 4e-6. Sampling is deterministic for a `seed`. Not
    thread-safe: calls share one Pinocchio data buffer."""

    def __init__(
        self,
        description: RobotDescription,
        *,
        margin_m: float = DEFAULT_MARGIN_M,
        tool_margin_m: float = DEFAULT_TOOL_MARGIN_M,
        spacing_m: float = DEFAULT_SPACING_M,
        seed: int = 0,
        package_dirs: Sequence[Path] = (),
    ) -> None:
        if min(margin_m, tool_margin_m, spacing_m) <= 0.0:
            raise ConfigError(
                f"robot self-filter: margin_m ({margin_m}), tool_margin_m ({tool_margin_m}) and spacing_m "
                f"({spacing_m}) must be > 0"
            )
        urdf = Path(description.urdf_file) if description.urdf_file else default_urdf()
        if not urdf.is_file():
            raise ConfigError(f"robot self-filter: URDF {urdf} does not exist")
        # package://<pkg>/... resolves under the folder holding <pkg>; for the usual
        # <pkg>/urdf/robot.urdf layout that is two levels above the URDF
        above = urdf.resolve().parents
        dirs = [str(d) for d in package_dirs] + [str(above[min(2, len(above) - 1)])]
        try:
            self.model, self.geometry = pin.buildModelsFromUrdf(
                str(urdf), package_dirs=dirs, geometry_types=pin.GeometryType.COLLISION
            )
        except (RuntimeError, ValueError) as exc:
            raise ConfigError(f"robot self-filter: cannot read URDF {urdf} with its meshes: {exc}") from exc
        self.data = self.model.createData()
        self.geometry_data = pin.GeometryData(self.geometry)
        self.base = transform(description.base_xyz, description.base_rpy)
        self.margin_m, self.spacing_m = float(margin_m), float(spacing_m)
        self.tool_margin_m = float(tool_margin_m)
        self.arm_joints = tuple(description.joint_names)
        self.gripper_joints = tuple(description.gripper_joints)
        self.open_width_m = float(description.gripper_open_width_m)
        self._slot = {name: self._joint_slot(name, urdf) for name in (*self.arm_joints, *self.gripper_joints)}

        # The tool end (the link the tool frame hangs on, and the fingers) gets the tighter
        # margin: it is what comes close to objects, and an obstacle point within a
        # generous margin of the fingers would vanish from the shield's view.
        if not self.model.existFrame(description.tool_frame):
            raise ConfigError(f"robot self-filter: tool frame {description.tool_frame!r} is not in {urdf.name}")
        tool_joints = {int(self.model.frames[self.model.getFrameId(description.tool_frame)].parentJoint)}
        tool_joints |= {self.model.getJointId(name) for name in self.gripper_joints}
        on_tool = [int(obj.parentJoint) in tool_joints for obj in self.geometry.geometryObjects]
        self.tool_spacing_m = min(self.spacing_m, self.tool_margin_m / TOOL_SAMPLES_PER_MARGIN)

        rng = np.random.default_rng(seed)
        parts = [
            sample_geometry(obj.geometry, self.tool_spacing_m if tool else spacing_m, rng, obj.name)
            for obj, tool in zip(self.geometry.geometryObjects, on_tool, strict=True)
        ]
        if not parts or sum(len(p) for p in parts) == 0:
            raise ConfigError(f"robot self-filter: URDF {urdf} has no collision geometry to sample")
        bounds = np.cumsum([0] + [len(p) for p in parts])
        self._ranges = list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))
        self._local: FloatArray = np.concatenate(parts)  # (S, 3), each block in its geometry's frame
        self._tool = np.concatenate([np.full(len(p), tool) for p, tool in zip(parts, on_tool, strict=True)])

    def _joint_slot(self, name: str, urdf: Path) -> tuple[int, int, float, float]:
        """(index into q, nq, lower, upper) of a one-variable joint, or two for an unbounded revolute."""
        if not self.model.existJointName(name):
            known = [self.model.names[i] for i in range(1, self.model.njoints)]
            raise ConfigError(f"robot self-filter: joint {name!r} is not in {urdf.name}; its joints: {known}")
        joint = self.model.joints[self.model.getJointId(name)]
        if joint.nq not in (1, 2):
            raise ConfigError(f"robot self-filter: joint {name!r} has {joint.nq} position variables")
        index = int(joint.idx_q)
        lower, upper = self.model.lowerPositionLimit[index], self.model.upperPositionLimit[index]
        return index, int(joint.nq), float(lower), float(upper)

    @property
    def on_tool(self) -> BoolArray:
        """(S,) which surface samples belong to the tool end (they use `tool_margin_m`)."""
        return self._tool.copy()

    @property
    def num_surface_points(self) -> int:
        """S, the number of sampled surface points."""
        return len(self._local)

    def configuration(self, joints: Mapping[str, float], gripper_width_m: float | None = None) -> FloatArray:
        """Pinocchio configuration (nq,) for joint positions by name (radians / metres).

        Every arm joint must be given (else `MissingJoints`). A finger joint is taken from
        `joints` when present, as measured (a simulated finger pressed a little past its
        limit is where it is), else set to `gripper_width_m / 2` (finger positions add up to
        the width; right for a gripper whose fingers are coupled, like the Panda hand), else
        to the open width / 2, then clipped to its limits. Other joints of the URDF stay at
        their neutral position."""
        missing = [name for name in self.arm_joints if name not in joints]
        if missing:
            raise MissingJoints(missing, list(joints))
        q: FloatArray = pin.neutral(self.model)
        width = self.open_width_m if gripper_width_m is None else float(gripper_width_m)
        for name, (index, nq, lower, upper) in self._slot.items():
            value = float(joints[name]) if name in joints else float(np.clip(0.5 * width, lower, upper))
            if nq == 2:  # unbounded revolute: (cos, sin)
                q[index : index + 2] = np.cos(value), np.sin(value)
            else:
                q[index] = value
        return q

    def surface_points(self, joints: Mapping[str, float], gripper_width_m: float | None = None) -> FloatArray:
        """The sampled robot surface (S, 3) in `world`, metres, for joint positions by name
        (radians for revolute joints, metres for the fingers; see `configuration`)."""
        q = self.configuration(joints, gripper_width_m)
        pin.forwardKinematics(self.model, self.data, q)
        pin.updateGeometryPlacements(self.model, self.data, self.geometry, self.geometry_data)
        out = np.empty_like(self._local)
        for (start, stop), placement in zip(self._ranges, self.geometry_data.oMg, strict=True):
            pose = self.base * placement
            np.matmul(self._local[start:stop], pose.rotation.T, out=out[start:stop])
            out[start:stop] += pose.translation
        return out

    def mask(self, points: FloatArray, joints: Mapping[str, float], gripper_width_m: float | None = None) -> BoolArray:
        """True (N,) where a finite `world` point (N, 3), metres, lies within `margin_m` of the
        robot's sampled surface for these joint positions (see `surface_points`).

        A voxel grid over the robot answers most points without a nearest-neighbour query:
        voxels are margin / sqrt(3) wide, so a point sharing a voxel with a surface sample is
        within the margin of it, and a point more than two voxels from every sample is not.
        Only the points in between go to a k-d tree of the samples."""
        points = np.asarray(points, dtype=np.float64).reshape(-1, 3)
        surface = self.surface_points(joints, gripper_width_m)
        out = _within(points, surface[~self._tool], self.margin_m)
        rest = np.flatnonzero(~out)
        out[rest] = _within(points[rest], surface[self._tool], self.tool_margin_m)
        return out


def _within(points: FloatArray, surface: FloatArray, margin: float) -> BoolArray:
    """True (N,) where a point lies within `margin` of a surface sample (metres)."""
    out: BoolArray = np.zeros(len(points), dtype=bool)
    if len(surface) == 0 or len(points) == 0:
        return out
    grid = _VoxelGrid(surface, margin)
    state = grid.lookup(points)
    out = state == _SURE
    maybe = np.flatnonzero(state == _MAYBE)
    if len(maybe):
        tree = cKDTree(surface, balanced_tree=False, compact_nodes=False)
        distance, _ = tree.query(points[maybe], distance_upper_bound=margin)
        out[maybe] = distance <= margin
    return out


_FAR, _MAYBE, _SURE = 0, 1, 2


class _VoxelGrid:
    """Voxels over surface samples (S, 3), each `_FAR`, `_MAYBE` or `_SURE` to hold a point
    within `margin` of a sample (metres, any frame)."""

    def __init__(self, samples: FloatArray, margin: float) -> None:
        self.cell = margin / np.sqrt(3.0)  # a voxel's diagonal is the margin
        reach = int(np.ceil(margin / self.cell))  # voxels a point within the margin can be away
        # a padding of reach + 1 voxels keeps the outermost voxels _FAR, so points beyond the
        # grid can be clamped onto it
        self.origin = samples.min(axis=0) - (reach + 1) * self.cell
        cells = np.floor((samples - self.origin) / self.cell).astype(np.int64)
        self.shape = cells.max(axis=0) + reach + 2
        occupied = np.zeros(tuple(self.shape), dtype=bool)
        occupied[cells[:, 0], cells[:, 1], cells[:, 2]] = True
        near = occupied
        for _ in range(reach):
            near = _dilate(near)
        self.state = np.where(occupied, _SURE, np.where(near, _MAYBE, _FAR)).astype(np.int8).ravel()
        self.strides = np.array([self.shape[1] * self.shape[2], self.shape[2], 1], dtype=np.int64)

    def lookup(self, points: FloatArray) -> npt.NDArray[np.int8]:
        """The state (N,) of the voxel holding each point (N, 3); `_FAR` outside the grid."""
        cells = np.floor((points - self.origin) * (1.0 / self.cell)).astype(np.int64)
        np.clip(cells, 0, self.shape - 1, out=cells)
        out: npt.NDArray[np.int8] = self.state[cells @ self.strides]
        return out


def _dilate(grid: BoolArray) -> BoolArray:
    """`grid` grown by one voxel into its 26-neighbourhood (shifted ORs along each axis in turn)."""
    out = grid
    for axis in range(3):
        grown = out.copy()
        lower = [slice(None)] * 3
        upper = [slice(None)] * 3
        lower[axis], upper[axis] = slice(0, -1), slice(1, None)
        grown[tuple(lower)] |= out[tuple(upper)]
        grown[tuple(upper)] |= out[tuple(lower)]
        out = grown
    return out
