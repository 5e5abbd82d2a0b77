"""The perception catalog of the simulated scenes, made once from the simulator's object models.

Each object of each scene is rendered alone on the table (the other objects moved out of
sight, so covers and plates hide nothing) from several viewpoints: the fixed scene camera
at a few table positions, the wrist camera at the home pose, and free cameras close
above / oblique around it like a wrist camera. Its pixels come from the simulator's truth
segmentation, its points from the depth image; `carryon_perception.core.catalog.describe`
turns each view into an Appearance, with the table top as the support plane.

The catalog is prior knowledge of object TYPES (like a detector's classes), never runtime
state: perception reads the YAML (`scripts/make_perception_catalog.py` writes it), never
this module.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import mujoco
import numpy as np
import numpy.typing as npt

from carryon_common.core.depth import backproject
from carryon_perception.core.catalog import Appearance, Catalog, CatalogEntry, describe
from carryon_sim.core.cameras import CameraFrame, CameraRig
from carryon_sim.core.scene import TABLE_TOP_Z, ObjectSpec, Scene, load_scene
from carryon_sim.core.world import SCENE_CAMERA, WRIST_CAMERA, World

FloatArray = npt.NDArray[np.float64]

IMAGE_SIZE = 256  # pixels, square: what sim_node publishes
MIN_PIXELS = 30  # a view with fewer object pixels gives no reference
# Table positions (x, y, metres, world) the scene camera sees each object at, besides its own.
SCENE_CAMERA_SPOTS = ((0.45, 0.25), (0.65, -0.25))
OFFSTAGE_SPOT = (0.55, 0.0)  # where an offstage object is put to be photographed
# Free close views: (elevation deg, azimuths deg); negative elevation looks down.
CLOSE_VIEWS = ((-89.0, (0.0,)), (-60.0, (0.0, 90.0, 180.0, 270.0)), (-35.0, (45.0, 135.0, 225.0, 315.0)))
CLOSE_MARGIN = 2.2  # free camera distance = this x the object's size (height or footprint), at least 0.25 m
_OUT_OF_SIGHT = 10.0  # metres along x: where the other objects go while one is rendered
_MUJOCO_TO_OPTICAL = np.diag([1.0, -1.0, -1.0])

CATALOG_HEADER = """\
Perception catalog of the simulated scenes: reference appearances (colour descriptor,
height and footprint) of every object of every scene in config/scenes/.
Made by scripts/make_perception_catalog.py (carryon_sim.harness.catalog_views): each object
rendered alone on the table from the scene camera, the wrist camera and close free cameras,
its pixels taken from the simulator's truth segmentation. Do not edit by hand; rerun the
script after changing scenes or object models (carryon_sim/test/test_perception_catalog.py
fails when this file drifts).
This is prior knowledge of object TYPES, like a detector's classes: what each kind of object
looks like. It is never runtime state (where objects are, what is hidden): perception
finds that in the images. `objects` maps scene names to `types`; objects of one type look
identical and share its references. Sizes in metres; the descriptor's layout is explained
in carryon_perception/carryon_perception/core/appearance.py."""


def catalog_type(obj: ObjectSpec) -> str:
    """The catalog type of a scene object: its object type, unless its colour or scale
    makes it look different from that type's default, then its own name."""
    return obj.type if obj.color is None and obj.scale == 1.0 else obj.name


def segment_appearance(
    frame: CameraFrame, instance: int, support_height_m: float = TABLE_TOP_Z
) -> tuple[Appearance, int] | None:
    """The appearance of one instance of a rendered frame, and its pixel count; None
    when it has no pixels. It is partial when cut off or hidden in part (`is_partial`)."""
    mask = frame.segmentation == instance
    pixels = int(mask.sum())
    if pixels == 0:
        return None
    points, _ = backproject(frame.depth, frame.K, frame.world_from_camera, mask=mask)
    partial = is_partial(frame, mask)
    return describe(frame.rgb[mask], points, support_height_m, partial=partial), pixels


def is_partial(frame: CameraFrame, mask: npt.NDArray[np.bool_], margin_m: float = 0.005) -> bool:
    """Whether a segment (H, W) may show only part of its object: it touches the image
    border, or a pixel next to it belongs to another object (the robot included) at least
    `margin_m` nearer the camera. What a segmenter knows too; the truth masks tell it here."""
    if mask[0].any() or mask[-1].any() or mask[:, 0].any() or mask[:, -1].any():
        return True
    table = {i for i, n in frame.labels.items() if n == "table"}
    other = (frame.segmentation != 0) & ~mask & ~np.isin(frame.segmentation, list(table))
    depth = frame.depth
    for axis in (0, 1):
        for shift in (1, -1):
            near = np.roll(other, shift, axis) & (np.roll(depth, shift, axis) < depth - margin_m)
            if (mask & near).any():
                return True
    return False


def frame_segments(frame: CameraFrame, min_pixels: int = MIN_PIXELS) -> dict[str, Appearance]:
    """Appearance of every scene object in a frame with at least `min_pixels` pixels
    (perfect segments from the truth masks; robot and table left out)."""
    out = {}
    for instance, name in frame.labels.items():
        if name in ("robot", "table"):
            continue
        described = segment_appearance(frame, instance)
        if described is not None and described[1] >= min_pixels:
            out[name] = described[0]
    return out


@dataclass
class FreeCamera:
    """Renders the model from free (look-at) cameras as CameraFrames, like CameraRig does
    for its named cameras. Call `close()` when done."""

    rig: CameraRig  # resolution, model and instance ids (`rig.labels`) to share
    object_of_body: dict[int, str]

    def __post_init__(self) -> None:
        model = self.rig.model
        self._renderer = mujoco.Renderer(model, height=self.rig.height, width=self.rig.width)
        self._option = mujoco.MjvOption()
        self._option.sitegroup[:] = 0  # as CameraRig: no helper sites, collision meshes only
        self._option.geomgroup[1] = 0
        instance_of_name = {name: i for i, name in self.rig.labels.items()}
        self._instance_of_geom = np.zeros(model.ngeom + 1, dtype=np.int32)  # index ngeom: "no geom"
        for geom in range(model.ngeom):
            name = self.object_of_body.get(int(model.geom_bodyid[geom]))
            if name is not None:
                self._instance_of_geom[geom] = instance_of_name[name]

    def close(self) -> None:
        self._renderer.close()

    def render(
        self, data: mujoco.MjData, lookat: Sequence[float], distance: float, azimuth: float, elevation: float
    ) -> CameraFrame:
        """One view looking at `lookat` (metres, world) from `distance` metres, at `azimuth`
        / `elevation` degrees (MuJoCo's free camera convention; negative looks down)."""
        camera = mujoco.MjvCamera()
        camera.type = mujoco.mjtCamera.mjCAMERA_FREE
        camera.lookat[:] = lookat
        camera.distance, camera.azimuth, camera.elevation = distance, azimuth, elevation
        r, model = self._renderer, self.rig.model
        r.update_scene(data, camera, scene_option=self._option)
        rgb = r.render().copy()
        gl = r.scene.camera[0]
        pose = np.eye(4)
        forward, up = np.asarray(gl.forward, dtype=np.float64), np.asarray(gl.up, dtype=np.float64)
        pose[:3, :3] = np.stack([np.cross(forward, up), up, -forward], axis=1) @ _MUJOCO_TO_OPTICAL
        pose[:3, 3] = gl.pos
        r.enable_depth_rendering()
        r.update_scene(data, camera, scene_option=self._option)
        depth = r.render().astype(np.float32)
        r.disable_depth_rendering()
        depth[depth >= model.stat.extent * model.vis.map.zfar * 0.99] = 0.0
        r.enable_segmentation_rendering()
        r.update_scene(data, camera, scene_option=self._option)
        seg = r.render()
        r.disable_segmentation_rendering()
        geom = np.where(seg[..., 1] == int(mujoco.mjtObj.mjOBJ_GEOM), seg[..., 0], model.ngeom)
        segmentation = self._instance_of_geom[geom]
        f = 0.5 * self.rig.height / math.tan(math.radians(float(model.vis.global_.fovy)) / 2)
        intrinsics = np.array([[f, 0.0, (self.rig.width - 1) / 2], [0.0, f, (self.rig.height - 1) / 2], [0, 0, 1.0]])
        return CameraFrame("free", rgb, depth, segmentation, dict(self.rig.labels), intrinsics, pose, float(data.time))


def _isolate(world: World, name: str, xy: tuple[float, float], yaw_deg: float = 0.0) -> None:
    """Put object `name` on the table at `xy` (yaw in degrees), every other object out of sight."""
    for obj in world.scene.spec.objects:
        x, y, z = world.object_position(obj.name)
        if obj.name == name:
            world.displace(name, xy[0] - x, xy[1] - y, TABLE_TOP_Z + 0.0005 - z)
            _set_yaw(world, name, math.radians(obj.yaw_deg + yaw_deg))
        else:
            world.displace(obj.name, _OUT_OF_SIGHT - x, 0.0, 0.0)


def _set_yaw(world: World, name: str, yaw: float) -> None:
    body = world.model.body(name)
    quat = [math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]
    if body.jntnum[0] == 1:
        adr = world.model.jnt_qposadr[body.jntadr[0]]
        world.data.qpos[adr + 3 : adr + 7] = quat
    else:
        world.model.body_quat[body.id] = quat
    mujoco.mj_forward(world.model, world.data)


def object_views(world: World, rig: CameraRig, free: FreeCamera, name: str) -> Iterator[Appearance]:
    """Reference appearances of scene object `name` from every catalog viewpoint."""
    spec = world.scene.object(name)
    place = world.scene.placements(world.seed)[name]
    home = OFFSTAGE_SPOT if spec.offstage else (place.x, place.y)
    instance = next(i for i, n in rig.labels.items() if n == name)
    for spot, yaw in ((home, 0.0), (SCENE_CAMERA_SPOTS[0], 30.0), (SCENE_CAMERA_SPOTS[1], 60.0)):
        _isolate(world, name, spot, yaw)
        for camera in (SCENE_CAMERA, WRIST_CAMERA):
            yield from _described(rig.render(world.data, camera), instance)
    _isolate(world, name, home)
    lo, hi = _world_extent(world, name)
    size = float(max(hi[2] - lo[2], np.max(hi[:2] - lo[:2])))
    distance = max(0.25, CLOSE_MARGIN * size)
    lookat = [(lo[0] + hi[0]) / 2, (lo[1] + hi[1]) / 2, (lo[2] + hi[2]) / 2]
    for elevation, azimuths in CLOSE_VIEWS:
        for azimuth in azimuths:
            yield from _described(free.render(world.data, lookat, distance, azimuth, elevation), instance)


def _described(frame: CameraFrame, instance: int) -> Iterator[Appearance]:
    """The view's appearance of `instance` if it shows the whole object: references are
    complete views (at least MIN_PIXELS, not cut off or hidden in part); partial views
    are what labelling has to tolerate, not what defines an object."""
    described = segment_appearance(frame, instance)
    if described is not None and described[1] >= MIN_PIXELS and not described[0].partial:
        yield described[0]


def _world_extent(world: World, name: str) -> tuple[FloatArray, FloatArray]:
    """Axis-aligned bounds (metres, world) of an object's geoms."""
    model, data = world.model, world.data
    body = model.body(name).id
    corners = []
    for geom in np.flatnonzero(model.geom_bodyid == body):
        centre, half = model.geom_aabb[geom, :3], model.geom_aabb[geom, 3:]
        box = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]) * half + centre
        corners.append(box @ data.geom_xmat[geom].reshape(3, 3).T + data.geom_xpos[geom])
    points = np.concatenate(corners)
    return points.min(axis=0), points.max(axis=0)


def scene_entries(scene: Scene) -> dict[str, CatalogEntry]:
    """Catalog entries of every object of one scene (seed 0 placements)."""
    world = World(scene, seed=0)
    rig = CameraRig(world.model, world.object_of_body, IMAGE_SIZE, IMAGE_SIZE)
    free = FreeCamera(rig, world.object_of_body)
    entries = {}
    try:
        for obj in scene.spec.objects:
            world.reset(0)
            refs = tuple(object_views(world, rig, free, obj.name))
            if not refs:
                raise RuntimeError(f"{scene.path}: object {obj.name} is never seen by a catalog viewpoint")
            heights = [r.height_m for r in refs if r.height_m is not None]
            widths = [r.footprint_m for r in refs if r.footprint_m is not None]
            height = round(float(np.median(heights)), 4) if heights else None
            footprint = round(max(widths), 4) if widths else None
            entries[obj.name] = CatalogEntry(obj.name, catalog_type(obj), refs, height, footprint)
    finally:
        free.close()
        rig.close()
    return entries


def build_catalog(scene_files: Iterable[Path]) -> Catalog:
    """The catalog of every object of every scene file. Objects of one catalog type share
    the references made for the first of them. ValueError when one name (an object, or a
    catalog type) stands for objects that look different in two places."""
    entries: dict[str, CatalogEntry] = {}
    by_type: dict[str, tuple[CatalogEntry, object]] = {}
    for path in sorted(scene_files):
        scene = load_scene(path)
        made = scene_entries(scene)
        for obj in scene.spec.objects:
            look = (obj.type, obj.color, obj.scale)
            shared, shared_look = by_type.setdefault(made[obj.name].type, (made[obj.name], look))
            if shared_look != look:
                raise ValueError(f"{path}: {obj.name} looks unlike another object of catalog type {shared.type!r}")
            if obj.name in entries and entries[obj.name].type != shared.type:
                raise ValueError(f"{path}: object {obj.name} is a {shared.type}, elsewhere a {entries[obj.name].type}")
            entries.setdefault(obj.name, replace(shared, name=obj.name))
    return Catalog(entries)


def catalog_differences(
    made: Catalog, stored: Catalog, *, histogram_tol: float = 0.01, size_tol_m: float = 0.002
) -> list[str]:
    """How `stored` differs from `made` beyond rendering noise (a bin by `histogram_tol`, a
    size by `size_tol_m` metres, so a different OpenGL driver is not drift); [] when equal."""
    out = []
    for name in sorted(set(made.entries) ^ set(stored.entries)):
        out.append(f"{name}: only in the {'made' if name in made.entries else 'stored'} catalog")
    for name in sorted(set(made.entries) & set(stored.entries)):
        a, b = made.entries[name], stored.entries[name]
        if a.type != b.type or len(a.references) != len(b.references):
            out.append(f"{name}: type {b.type} with {len(b.references)} views, made {a.type} with {len(a.references)}")
            continue
        sizes = [(a.height_m, b.height_m), (a.footprint_m, b.footprint_m)]
        for ra, rb in zip(a.references, b.references, strict=True):
            sizes += [(ra.height_m, rb.height_m), (ra.footprint_m, rb.footprint_m)]
            if np.max(np.abs(np.subtract(ra.histogram, rb.histogram))) > histogram_tol:
                out.append(f"{name}: a reference's colour histogram differs")
                break
        if any(
            (x is None) != (y is None) or (x is not None and y is not None and abs(x - y) > size_tol_m)
            for x, y in sizes
        ):
            out.append(f"{name}: sizes differ")
    return out
