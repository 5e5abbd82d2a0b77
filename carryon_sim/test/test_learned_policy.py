"""The learned policy's pipeline: demonstrations recorded as a LeRobotDataset, LeRobot's
trainer, the checkpoint served by lerobot_local in the episode loop.

The layout checks (what a frame holds, that a recorded action is what the driver executed
and that lerobot_local maps it back to the same command) run everywhere. The pipeline test
needs the LeRobot extra: it records two short demonstrations, trains a TINY network for a
few steps (the real training is `make policy`, ~1 h) and plays it through `evaluate`;
`scripts/test_lerobot_extra.sh` runs it (there a missing extra fails instead of skipping).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest

from carryon_policy.core import rotations
from carryon_policy.core.action_mapping import ActionMapper
from carryon_policy.core.backends import BACKENDS
from carryon_policy.core.config import PolicyConfig
from carryon_policy.core.policy import Observation, Policy, PolicyUnavailable, RobotState
from carryon_sim.core.driver import Driver
from carryon_sim.core.world import World
from carryon_sim.harness.episodes import Task, observe, run_episode
from carryon_sim.harness.learned import layout
from carryon_sim.harness.learned.record import TASKS, robot_state
from carryon_sim.harness.stand_in import stand_in_script

HAVE_LEROBOT = importlib.util.find_spec("lerobot") is not None and importlib.util.find_spec("torch") is not None
REQUIRE_LEROBOT = os.environ.get("CARRYON_REQUIRE_LEROBOT") == "1"
needs_lerobot = pytest.mark.skipif(
    not (HAVE_LEROBOT or REQUIRE_LEROBOT), reason="lerobot extra not installed; run scripts/test_lerobot_extra.sh"
)
CARROT = "put the carrot in the bowl"


def _expert() -> Policy:
    config = PolicyConfig(scripted_drop_probability=0.0, scripted_slip_probability=0.0, scripted_stuck_probability=0.0)
    return BACKENDS.get("sim_scripted").make(config, None)


def test_episode_layouts_are_seeded_and_differ_between_seeds() -> None:
    one, again, other = (World(layout.episode_scene(s), seed=s) for s in (5, 5, 6))
    for world in (one, again, other):
        world.reset(world.seed)
    np.testing.assert_array_equal(one.object_position("bowl"), again.object_position("bowl"))
    assert np.linalg.norm(one.object_position("bowl") - other.object_position("bowl")) > 1e-3
    assert "bottle" not in {o.name for o in one.scene.spec.objects}  # the obstacle is removed


def test_a_recorded_action_is_the_executed_command_and_lerobot_local_maps_it_back() -> None:
    """The label of frame t is the tool target the driver executed at t; read through the
    serving config's ActionMapper (ee_absolute, rot6d) it is the same pose and gripper."""
    world = World(layout.episode_scene(3), seed=3)
    frames: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def record(w: World, driver: Driver) -> None:
        position, rotation = driver.target
        frames.append((robot_state(w), layout.action_vector(w, driver.target), position.copy(), rotation.copy()))

    task = Task(CARROT, stand_in_script(CARROT), 300)
    result = run_episode(world, _expert(), [task], 3, steps_per_inference=8, record=record, setup=TASKS[CARROT].setup)
    assert result.success
    assert len(frames) == result.steps
    config = layout.policy_config("unused")
    mapper = ActionMapper.from_config(config, config.chunk_horizon, None)
    actions = np.stack([f[1] for f in frames[40:56]]).astype(np.float64)
    robot = RobotState(np.zeros(3), np.eye(3), np.zeros(7), 0.08)
    out = mapper.to_output(actions, Observation(0, 0.0, robot))
    for k in range(16):
        np.testing.assert_allclose(out.positions[k], frames[40 + k][2], atol=1e-6)
        rotation = rotations.rotvec_to_matrix(out.rotations[k])
        np.testing.assert_allclose(rotation, frames[40 + k][3], atol=1e-5)
    gripper = [f[1][-1] for f in frames]
    assert min(gripper) == 0.0 and max(gripper) > 0.5  # it opened, grasped and let go
    states = np.stack([f[0] for f in frames])
    assert states.shape == (len(frames), 10) and states.dtype == np.float32
    # the arm follows the commands: the state a few steps later is near the target
    np.testing.assert_allclose(states[60, :3], frames[57][2], atol=0.03)


def test_a_learned_policy_sees_no_ground_truth() -> None:
    world = World(layout.episode_scene(1), seed=1)
    world.reset(1)
    assert observe(world, 0, 0).objects  # the scripted stand-in's SIMULATOR ORACLE
    blind = observe(world, 0, 0, images={"scene": np.zeros((4, 4, 3), np.uint8)}, ground_truth=False)
    assert not blind.objects and blind.scene == "" and set(blind.images) == {"scene"}


@needs_lerobot
def test_record_train_and_serve_a_tiny_policy(tmp_path: Path) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from carryon_sim.harness.learned.evaluate import evaluate, summary
    from carryon_sim.harness.learned.record import record_demos
    from carryon_sim.harness.learned.train import train

    root = tmp_path / "demos"
    made = record_demos(root, 2, seed=0)
    assert made["kept"] == {CARROT: 1, "open the pink cover": 1} and made["frames"] > 200
    dataset = LeRobotDataset("carryon/food_serving_demos", root=root)
    assert dataset.num_episodes == 2 and len(dataset) == made["frames"]
    item = dataset[0]
    assert tuple(item["observation.images.wrist"].shape) == (3, *layout.IMAGE_SIZE)
    assert tuple(item["action"].shape) == (10,) and item["task"] == CARROT
    with pytest.raises(FileExistsError):
        record_demos(root, 1, seed=0)

    policy = tmp_path / "policy"
    trained = train(root, policy, steps=2, seed=0, batch_size=4, tiny=True)
    assert trained["steps"] == 2 and trained["inference_s_per_chunk_1_thread"]["calls"] == 20
    assert json.loads((policy / "carryon_policy.json").read_text())["final_loss"] is not None

    # served over openpi's protocol (benchmarks in CarryOn's virtualenv), the same commands
    from carryon_policy.core.lerobot_policy import checkpoint_folder, load_engine, make_lerobot_policy
    from carryon_policy.lerobot_server import LerobotServer

    world = World(layout.episode_scene(9), seed=9)
    world.reset(9)
    cameras = layout.PolicyCameras(world)
    seen = observe(world, 1, 0, images=cameras(world), ground_truth=False)
    cameras.close()
    local = make_lerobot_policy(layout.policy_config(policy))
    server = LerobotServer(load_engine(checkpoint_folder(policy), "cpu"), policy).start()
    remote = BACKENDS.get("openpi_remote").make(layout.remote_policy_config(server.uri), None)
    try:
        local.reset(CARROT, 0)
        remote.reset(CARROT, 0)
        mine, theirs = local.infer(seen), remote.infer(seen)
        np.testing.assert_allclose(theirs.positions, mine.positions, atol=1e-5)
        np.testing.assert_allclose(theirs.gripper, mine.gripper, atol=1e-5)
        assert server.served == 1 and server.metadata["images"]["observation.images.scene"] == [96, 96, 3]
    finally:
        remote.close()
        server.stop()
    # with an API key, a client without it is refused before any inference
    guarded = LerobotServer(local.engine, policy, api_key="s3cret").start()
    stranger = BACKENDS.get("openpi_remote").make(layout.remote_policy_config(guarded.uri), None)
    try:
        with pytest.raises(PolicyUnavailable):
            stranger.infer(seen)
        assert guarded.served == 0
    finally:
        stranger.close()
        guarded.stop()
        local.close()

    rows = evaluate(policy, tmp_path / "rows.jsonl", 1, seed=0, tasks=(CARROT,))
    assert len(rows) == 1 and rows[0]["steps"] > 0 and rows[0]["infer_s"]
    again = evaluate(policy, tmp_path / "rows.jsonl", 1, seed=0, tasks=(CARROT,))  # resumed: nothing replayed
    assert again == rows
    figures = summary(rows)
    assert figures["tasks"][CARROT]["episodes"] == 1 and figures["chunks"] == len(rows[0]["infer_s"])


def _write_bag(path: Path, *, steps: int = 24) -> None:
    """A recorder_node-like bag (rosbag2, MCAP, the same definitions): two released chunks
    of a downward move, both cameras, pose, gripper and joints every 50 ms."""
    from rosbags.rosbag2 import StoragePlugin, Writer

    from carryon_bringup.core.recorder import typestore_for

    store = typestore_for([Path(__file__).resolve().parents[2] / "carryon_interfaces"])
    t = store.types
    time_msg, header_msg, vector3 = (
        t["builtin_interfaces/msg/Time"],
        t["std_msgs/msg/Header"],
        t["geometry_msgs/msg/Vector3"],
    )

    def header(ns: int) -> object:
        return header_msg(stamp=time_msg(sec=ns // 10**9, nanosec=ns % 10**9), frame_id="world")

    def step(k: int) -> object:
        position = vector3(x=0.5, y=0.0, z=0.6 - 0.01 * k)
        return t["carryon_interfaces/msg/ActionStep"](
            position=position, rotation=vector3(x=np.pi, y=0.0, z=0.0), gripper=0.0
        )

    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        connections = {}

        def write(topic: str, type_name: str, ns: int, msg: object) -> None:
            if topic not in connections:
                msgdef, _ = store.generate_msgdef(type_name, ros_version=2)
                connections[topic] = writer.add_connection(
                    topic, type_name, msgdef=msgdef, rihs01=store.hash_rihs01(type_name)
                )
            writer.write(connections[topic], ns + 1_000_000, store.serialize_cdr(msg, type_name))

        for k in range(steps + 2):
            ns = 10**9 + k * 50_000_000
            image = np.full((64, 64, 3), k, dtype=np.uint8)
            for camera in ("scene", "wrist"):
                msg = t["sensor_msgs/msg/Image"](
                    header=header(ns),
                    height=64,
                    width=64,
                    encoding="rgb8",
                    is_bigendian=0,
                    step=192,
                    data=image.reshape(-1),
                )
                write(f"/carryon/camera/{camera}/color", "sensor_msgs/msg/Image", ns, msg)
            pose = t["geometry_msgs/msg/Pose"](
                position=t["geometry_msgs/msg/Point"](x=0.5, y=0.0, z=0.6 - 0.01 * k),
                orientation=t["geometry_msgs/msg/Quaternion"](x=1.0, y=0.0, z=0.0, w=0.0),
            )
            write(
                "/carryon/ee_pose",
                "geometry_msgs/msg/PoseStamped",
                ns,
                t["geometry_msgs/msg/PoseStamped"](header=header(ns), pose=pose),
            )
            write("/carryon/gripper/width", "std_msgs/msg/Float64", ns, t["std_msgs/msg/Float64"](data=0.08))
            joints = t["sensor_msgs/msg/JointState"](
                header=header(ns),
                name=[f"panda_joint{i}" for i in range(1, 8)],
                position=np.full(7, 0.1 * k),
                velocity=np.zeros(0),
                effort=np.zeros(0),
            )
            write("/carryon/joint_states", "sensor_msgs/msg/JointState", ns, joints)
            if k % 12 == 0 and k < steps:
                chunk = t["carryon_interfaces/msg/ActionChunk"](
                    header=header(ns),
                    chunk_id=k,
                    subtask_id="s1",
                    source=0,
                    convention=1,
                    dt=0.05,
                    observation_id=k,
                    observation_stamp=header(ns).stamp,
                    steps=[step(k + i) for i in range(16)],
                    session=0,
                    sequence=k,
                    signature="",
                )
                write("/carryon/shield/chunk", "carryon_interfaces/msg/ActionChunk", ns, chunk)


@needs_lerobot
def test_a_recorder_bag_becomes_a_lerobot_dataset(tmp_path: Path) -> None:
    from carryon_policy.core.lerobot_policy import _import_lerobot

    _import_lerobot()
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from carryon_policy import bag_dataset

    _write_bag(tmp_path / "bag")
    made = bag_dataset.convert([tmp_path / "bag"], tmp_path / "runs", task=CARROT)
    assert made["frames"] == 12 + 16 and made["fps"] == 20 and made["episodes"][0]["task"] == CARROT
    dataset = LeRobotDataset(bag_dataset.REPO_ID, root=tmp_path / "runs")
    assert dataset.num_episodes == 1 and len(dataset) == 28
    item = dataset[13]  # step 1 of the second chunk (stamped at k = 12): commanded z = 0.6 - 0.13
    assert item["action"][2].item() == pytest.approx(0.47) and item["task"] == CARROT
    assert tuple(item["observation.images.scene"].shape) == (3, *layout.IMAGE_SIZE)
    assert item["observation.images.scene"].max().item() == pytest.approx(13 / 255, abs=1e-6)  # that instant's image
    assert item["joint_positions"][0].item() == pytest.approx(1.3)
    assert item["observation.state"][2].item() == pytest.approx(0.47)
    assert bag_dataset.main(["--bag", str(tmp_path / "bag"), "--out", str(tmp_path / "runs")]) == 2  # exists
