"""The simulated tabletop: a Franka Panda with its parallel gripper, a table, and the
objects of a scene, built with MuJoCo's model editing API (no ROS).

The Panda model (MJCF + meshes) comes from the robosuite wheel's asset folder, loaded
offline; its torque motors are replaced by joint position servos with gravity
compensation so IK targets can be tracked. Frames: `world` has z up, the robot base at
the origin facing +x, the table top at `TABLE_TOP_Z`.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np
import numpy.typing as npt

from carryon_common.core.errors import CarryOnError
from carryon_sim.core.objects import Role
from carryon_sim.core.scene import TABLE_TOP_Z, TABLE_X, TABLE_Y, PerturbationSpec, Placement, Scene

ARM_JOINTS = tuple(f"panda_joint{i}" for i in range(1, 8))
FINGER_JOINTS = ("panda_gripper_finger_joint1", "panda_gripper_finger_joint2")
# The finger joints as the Panda's URDF (config/robot/panda.yaml) and franka_ros name them in
# joint_states: each finger's distance from the hand's centre line, metres, >= 0.
URDF_FINGER_JOINTS = ("panda_finger_joint1", "panda_finger_joint2")
EE_SITE = "panda_gripper_grip_site"  # tool centre point between the fingertips
SCENE_CAMERA = "scene_camera"
WRIST_CAMERA = "panda_eye_in_hand"
# A comfortable pose above the table, gripper pointing down (radians).
HOME_Q = (0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785)
# Position-servo gains per arm joint (N m / rad) and the joint torque limits (N m).
_KP = (4500.0, 4500.0, 3500.0, 3500.0, 2000.0, 2000.0, 2000.0)
_TORQUE_LIMIT = (87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0)
FINGER_OPEN_M = 0.04  # each finger's travel, metres (width = 2x)
SLIP_FRICTION = 0.02  # sliding friction of a slipping object (normally about 1)


class AssetsMissing(CarryOnError):
    """The robot model files are not installed."""


@dataclass(frozen=True)
class PandaAssets:
    robot_xml: Path
    gripper_xml: Path

    @classmethod
    def locate(cls) -> PandaAssets:
        """Find the Panda MJCF files in the installed robosuite wheel (without importing it)."""
        spec = importlib.util.find_spec("robosuite")
        if spec is None or not spec.submodule_search_locations:
            raise AssetsMissing(
                "robot model files not found: install them with `pip install --no-deps -r requirements/assets.txt` "
                "(done by `make setup`)"
            )
        root = Path(next(iter(spec.submodule_search_locations))) / "models" / "assets"
        assets = cls(root / "robots" / "panda" / "robot.xml", root / "grippers" / "panda_gripper.xml")
        for path in (assets.robot_xml, assets.gripper_xml):
            if not path.is_file():
                raise AssetsMissing(f"robot model file missing: {path}")
        return assets


def _add_robot(world: mujoco.MjSpec, assets: PandaAssets) -> None:
    robot = mujoco.MjSpec.from_file(str(assets.robot_xml))
    robot.meshdir = str(assets.robot_xml.parent)
    gripper = mujoco.MjSpec.from_file(str(assets.gripper_xml))
    gripper.meshdir = str(assets.gripper_xml.parent)
    for actuator, kp, limit in zip(list(robot.actuators), _KP, _TORQUE_LIMIT, strict=True):
        actuator.set_to_position(kp=kp, kv=2.0 * np.sqrt(kp))
        actuator.ctrlrange = robot.joint(actuator.target).range
        actuator.ctrllimited = 1
        actuator.forcerange = [-limit, limit]
        actuator.forcelimited = 1
    for body in robot.bodies:
        body.gravcomp = 1.0
    for body in gripper.bodies:
        body.gravcomp = 1.0
    robot.body("right_hand").add_frame().attach_body(gripper.body("right_gripper"), "gripper_", "")
    world.worldbody.add_frame(pos=[0.0, 0.0, TABLE_TOP_Z]).attach_body(robot.body("base"), "panda_", "")


def _add_table(world: mujoco.MjSpec) -> None:
    half = [(TABLE_X[1] - TABLE_X[0]) / 2, (TABLE_Y[1] - TABLE_Y[0]) / 2, 0.02]
    center = [(TABLE_X[0] + TABLE_X[1]) / 2, (TABLE_Y[0] + TABLE_Y[1]) / 2, TABLE_TOP_Z - half[2]]
    table = world.worldbody.add_body(name="table", pos=center)
    table.add_geom(name="table/top", type=mujoco.mjtGeom.mjGEOM_BOX, size=half, rgba=[0.55, 0.4, 0.28, 1])
    world.worldbody.add_geom(name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[3, 3, 0.1], rgba=[0.75] * 3 + [1])


def build_spec(scene: Scene, placements: dict[str, Placement], assets: PandaAssets | None = None) -> mujoco.MjSpec:
    """The MuJoCo spec of a scene with its objects at `placements`."""
    world = mujoco.MjSpec()
    world.modelname = scene.name
    world.option.timestep = 0.002
    world.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    world.visual.global_.offwidth = 1280
    world.visual.global_.offheight = 960
    world.worldbody.add_light(name="top", pos=[0.5, 0, 2.5], dir=[0, 0, -1], diffuse=[0.8, 0.8, 0.8])
    world.worldbody.add_light(name="front", pos=[2.0, 0, 1.5], dir=[-1, 0, -0.5], diffuse=[0.3, 0.3, 0.3])
    _add_table(world)
    _add_robot(world, assets or PandaAssets.locate())
    # Fixed scene camera facing the robot across the table (x-axis right = world +y).
    world.worldbody.add_camera(name=SCENE_CAMERA, pos=[1.55, 0.0, 1.45], xyaxes=[0, 1, 0, -0.62, 0, 0.78], fovy=58)
    for obj in scene.spec.objects:
        place = placements[obj.name]
        kind = obj.kind
        quat = [np.cos(place.yaw / 2), 0.0, 0.0, np.sin(place.yaw / 2)]
        body = world.worldbody.add_body(name=obj.name, pos=[place.x, place.y, place.z + 0.0005], quat=quat)
        if kind.movable:
            body.add_freejoint(name=f"{obj.name}/free")
        rgba = (*obj.color, 1.0) if obj.color else kind.rgba
        kind.build(body, obj.name, obj.scale, rgba, kind.mass_kg * obj.scale**3)
    return world


@dataclass(frozen=True)
class RobotIndex:
    """Addresses of the robot's joints, actuators and tool site in a compiled model."""

    arm_qpos: npt.NDArray[np.int64]
    arm_dof: npt.NDArray[np.int64]
    finger_qpos: npt.NDArray[np.int64]
    arm_actuators: npt.NDArray[np.int64]
    finger_actuators: npt.NDArray[np.int64]
    ee_site: int

    @classmethod
    def of(cls, model: mujoco.MjModel) -> RobotIndex:
        def joints(names: tuple[str, ...], table: npt.NDArray[np.int32]) -> npt.NDArray[np.int64]:
            return np.array([table[model.joint(n).id] for n in names], dtype=np.int64)

        def actuators_for(names: tuple[str, ...]) -> npt.NDArray[np.int64]:
            ids = {model.joint(n).id for n in names}
            return np.array([i for i in range(model.nu) if model.actuator_trnid[i, 0] in ids], dtype=np.int64)

        return cls(
            arm_qpos=joints(ARM_JOINTS, model.jnt_qposadr),
            arm_dof=joints(ARM_JOINTS, model.jnt_dofadr),
            finger_qpos=joints(FINGER_JOINTS, model.jnt_qposadr),
            arm_actuators=actuators_for(ARM_JOINTS),
            finger_actuators=actuators_for(FINGER_JOINTS),
            ee_site=model.site(EE_SITE).id,
        )


class World:
    """A compiled scene with its simulation state.

    `reset(seed)` places the objects for that seed and puts the arm at `HOME_Q`; the
    same seed gives the same episode. Times are simulation seconds.
    """

    def __init__(self, scene: Scene, seed: int = 0, assets: PandaAssets | None = None) -> None:
        self.scene = scene
        self.model = build_spec(scene, scene.placements(seed), assets or PandaAssets.locate()).compile()
        self.data = mujoco.MjData(self.model)
        self.robot = RobotIndex.of(self.model)
        self.object_of_body = self._object_bodies()
        self.reset(seed)

    def reset(self, seed: int) -> None:
        """Start a new episode: objects placed for `seed`, arm at home, gripper open, time 0."""
        self.seed = seed
        self._schedule = sorted(self.scene.spec.perturbations, key=lambda p: p.at_s)
        self._forced_open_until = 0.0
        self._gripper_command = 0.0
        self._friction: dict[int, float] = getattr(self, "_friction", {})
        self._end_slip()
        mujoco.mj_resetData(self.model, self.data)
        for name, place in self.scene.placements(seed).items():
            body = self.model.body(name)
            quat = [np.cos(place.yaw / 2), 0.0, 0.0, np.sin(place.yaw / 2)]
            pos = [place.x, place.y, place.z + 0.0005]
            if body.jntnum[0] == 1:  # free joint: the pose lives in qpos
                adr = self.model.jnt_qposadr[body.jntadr[0]]
                self.data.qpos[adr : adr + 7] = [*pos, *quat]
            else:  # fixed to the world: the pose lives in the model
                self.model.body_pos[body.id] = pos
                self.model.body_quat[body.id] = quat
        self.data.qpos[self.robot.arm_qpos] = HOME_Q
        self.data.ctrl[self.robot.arm_actuators] = HOME_Q
        self.set_gripper(0.0)
        self.data.qpos[self.robot.finger_qpos] = [FINGER_OPEN_M, -FINGER_OPEN_M]
        mujoco.mj_forward(self.model, self.data)

    def _object_bodies(self) -> dict[int, str]:
        """Body id -> object name for scene objects, `robot` for robot links, `table` for the table."""
        names: dict[int, str] = {}
        objects = {o.name for o in self.scene.spec.objects}
        for body_id in range(1, self.model.nbody):
            name = self.model.body(body_id).name
            if name in objects or name == "table":
                names[body_id] = name
            elif name.startswith("panda_"):
                names[body_id] = "robot"
        return names

    @property
    def time(self) -> float:
        return float(self.data.time)

    def step(self, seconds: float) -> None:
        """Advance physics by `seconds` (rounded to whole timesteps)."""
        for _ in range(max(1, round(seconds / self.model.opt.timestep))):
            while self._schedule and self.data.time >= self._schedule[0].at_s:
                self.perturb(self._schedule.pop(0))
            if self._slip_until and self.data.time >= self._slip_until:
                self._end_slip()
            if self._forced_open_until and self.data.time >= self._forced_open_until:
                self._forced_open_until = 0.0
                self._apply_gripper()
            mujoco.mj_step(self.model, self.data)

    def arm_q(self) -> npt.NDArray[np.float64]:
        """Arm joint positions, radians."""
        return np.array(self.data.qpos[self.robot.arm_qpos], dtype=np.float64)

    def finger_q(self) -> npt.NDArray[np.float64]:
        """Each finger's distance from the hand's centre line (`URDF_FINGER_JOINTS` order), metres.
        The simulated fingers are driven apart (no coupling like the real hand's), so an
        off-centre grasp leaves them unequal: one finger may be near the centre line and the
        other fully out while the width is the same."""
        q = self.data.qpos[self.robot.finger_qpos]
        return np.array([q[0], -q[1]], dtype=np.float64)

    def joint_states(self) -> dict[str, float]:
        """Arm (radians) and finger (metres, see `finger_q`) positions by the URDF's joint
        names: what the arm's joint_states carries, and what the robot self-filter needs to
        pose each finger where it is."""
        names = (*ARM_JOINTS, *URDF_FINGER_JOINTS)
        values = (*self.arm_q().tolist(), *self.finger_q().tolist())
        return dict(zip(names, values, strict=True))

    def arm_target(self) -> npt.NDArray[np.float64]:
        """The 7 arm joints' current position targets (the last commanded), radians."""
        out: npt.NDArray[np.float64] = self.data.ctrl[self.robot.arm_actuators].astype(np.float64)
        return out

    def set_arm_target(self, q: npt.NDArray[np.float64]) -> None:
        """Joint position targets for the 7 arm joints, radians (clipped to joint limits)."""
        lo, hi = self.model.actuator_ctrlrange[self.robot.arm_actuators].T
        self.data.ctrl[self.robot.arm_actuators] = np.clip(q, lo, hi)

    @property
    def gripper_command(self) -> float:
        """The last gripper command, [0, 1] (0 fully open), whatever a drop forces now."""
        return self._gripper_command

    def set_gripper(self, command: float) -> None:
        """Gripper command in [0, 1]: 0 fully open, 1 fully closed (ignored during a drop)."""
        self._gripper_command = float(np.clip(command, 0.0, 1.0))
        self._apply_gripper()

    def _apply_gripper(self) -> None:
        command = 0.0 if self.data.time < self._forced_open_until else self._gripper_command
        opening = FINGER_OPEN_M * (1.0 - command)
        self.data.ctrl[self.robot.finger_actuators] = [opening, -opening]

    # -- perturbations (tests, benchmarks, scripted schedules) -------------------------
    def perturb(self, spec: PerturbationSpec) -> None:
        """Apply one perturbation now. ValueError / UnknownNameError for bad names."""
        if spec.kind == "drop":
            self.drop()
        elif spec.kind == "displace":
            self.displace(spec.object, *spec.by)
        elif spec.kind == "relocate":
            self.relocate(spec.object, spec.location)
        elif spec.kind == "cover":
            self.cover(spec.object, spec.item)
        elif spec.kind == "slip":
            self.slip(spec.object, spec.duration_s)
        elif spec.kind == "place":
            self.place(spec.object, spec.location)
        else:
            self.uncover(spec.object)

    def slip(self, name: str, duration_s: float) -> None:
        """Make a grasp of an object slip for `duration_s`: the object and the gripper's
        fingers become nearly frictionless (MuJoCo uses the larger friction of a pair)."""
        self.scene.object(name)
        bodies = {self.model.body(name).id} | {
            b for b in range(self.model.nbody) if self.model.body(b).name.startswith("panda_gripper_")
        }
        geoms = [g for g in range(self.model.ngeom) if int(self.model.geom_bodyid[g]) in bodies]
        for geom in geoms:
            self._friction.setdefault(geom, float(self.model.geom_friction[geom, 0]))
            self.model.geom_friction[geom, 0] = SLIP_FRICTION
        self._slip_until = self.data.time + duration_s

    def _end_slip(self) -> None:
        for geom, friction in self._friction.items():
            self.model.geom_friction[geom, 0] = friction
        self._friction.clear()
        self._slip_until = 0.0

    def drop(self, duration_s: float = 0.5) -> None:
        """Open the gripper for `duration_s` whatever it is commanded: a held object falls."""
        self._forced_open_until = self.data.time + duration_s
        self._apply_gripper()

    def displace(self, name: str, dx: float, dy: float, dz: float = 0.0) -> None:
        """Move an object by (dx, dy, dz) metres in the world frame (a fixed obstacle too)."""
        self.scene.object(name)  # unknown names: UnknownNameError listing the objects
        body = self.model.body(name)
        if body.jntnum[0] == 1:
            adr = self.model.jnt_qposadr[body.jntadr[0]]
            self.data.qpos[adr : adr + 3] += [dx, dy, dz]
            dof = self.model.jnt_dofadr[body.jntadr[0]]
            self.data.qvel[dof : dof + 6] = 0.0
        else:
            self.model.body_pos[body.id] += [dx, dy, dz]
        mujoco.mj_forward(self.model, self.data)

    def relocate(self, name: str, location: str) -> None:
        """Move an object to the centre of a named location (e.g. to make scene memory stale)."""
        spec = self.scene.spec.locations.get(location)
        if spec is None:
            raise ValueError(f"unknown location {location!r}; valid: {', '.join(sorted(self.scene.spec.locations))}")
        x, y, _ = self.object_position(name)
        self.displace(name, spec.center[0] - x, spec.center[1] - y)

    def place(self, name: str, location: str) -> None:
        """Put an object (typically an offstage obstacle) on the table at a named location."""
        spec = self.scene.spec.locations.get(location)
        if spec is None:
            raise ValueError(f"unknown location {location!r}; valid: {', '.join(sorted(self.scene.spec.locations))}")
        x, y, z = self.object_position(name)
        self.displace(name, spec.center[0] - x, spec.center[1] - y, TABLE_TOP_Z + 0.0005 - z)

    def uncover(self, cover: str, distance_m: float = 0.15) -> None:
        """Lift a cover off what it hides and set it down `distance_m` towards the robot."""
        if self.scene.object(cover).kind.role != Role.COVER:
            raise ValueError(f"{cover} is not a cover")
        self.displace(cover, -distance_m, 0.0)

    def cover(self, cover: str, item: str) -> None:
        """Put a cover over an item (it is set down around the item)."""
        if self.scene.object(cover).kind.role != Role.COVER:
            raise ValueError(f"{cover} is not a cover")
        cx, cy, cz = self.object_position(cover)
        x, y, _ = self.object_position(item)
        self.displace(cover, x - cx, y - cy, TABLE_TOP_Z + 0.0005 - cz)

    def gripper_width(self) -> float:
        """Measured distance between the fingers, metres."""
        q = self.data.qpos[self.robot.finger_qpos]
        return float(q[0] - q[1])

    def ee_pose(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Tool centre point position (metres) and rotation matrix (3x3), world frame."""
        site = self.robot.ee_site
        return self.data.site_xpos[site].copy(), self.data.site_xmat[site].reshape(3, 3).copy()

    def object_position(self, name: str) -> npt.NDArray[np.float64]:
        """Position of an object's body frame (its base centre), metres, world."""
        return np.array(self.data.xpos[self.model.body(name).id], dtype=np.float64)

    def objects_with_role(self, role: Role) -> list[str]:
        return [o.name for o in self.scene.spec.objects if o.kind.role == role]
