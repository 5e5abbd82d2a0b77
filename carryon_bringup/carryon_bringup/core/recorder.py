"""What recorder_node records, and the message definitions a bag and Foxglove need.

A recording is a rosbag2 folder (MCAP storage, written with `rosbags`): `ros2 bag play`
replays it into rviz on a robot PC, Foxglove opens the .mcap file, and
`carryon replay` republishes it on a plain install. The same raw CDR messages can go to a
Foxglove live server (foxglove-sdk) with their `ros2msg` definitions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from carryon_common.core import names
from carryon_common.core.config import NodeConfig

DEFAULT_TOPICS = [
    "planner/plan_state",
    "judge/verdict",
    "shield/events",
    "shield/markers",
    "shield/obstacles",
    "shield/chunk",
    "policy/chunk",
    "recovery/chunk",
    "estop/state",
    "memory/changed",
    "ee_pose",
    "gripper/width",
    "joint_states",
    "sim/truth",
    "camera/scene/color",
    "perception/scene",
]
# What carryon_policy.bag_dataset makes a LeRobotDataset of (`dataset_rate_hz` > 0 adds them):
# the released chunks, the tool pose, gripper and joints, the plan (task text, outcome) and
# the cameras the learned policy reads, these kept at the control rate.
DATASET_TOPICS = ["shield/chunk", "ee_pose", "gripper/width", "joint_states", "planner/plan_state"]
DATASET_CAMERAS = ["camera/scene/color", "camera/wrist/color"]
# Kept at most `heavy_rate_hz` per topic: images, clouds and the perceived scene (its objects' points).
IMAGE_TYPES = {
    "sensor_msgs/msg/Image",
    "sensor_msgs/msg/CompressedImage",
    "sensor_msgs/msg/PointCloud2",
    "carryon_interfaces/msg/PerceivedScene",
}


class RecorderConfig(NodeConfig):
    topics: list[str] = Field(
        default_factory=lambda: list(DEFAULT_TOPICS),
        description="Topics to record / serve, relative to the graph namespace (absolute names as they are).",
    )
    record: bool = Field(True, description="Write a rosbag2 (MCAP) of the topics.")
    bag_dir: str = Field(
        "", description="Bag folder ('' = <run folder of carryon up>/bag, else ./bag-<time>); must not exist yet."
    )
    foxglove_port: int = Field(
        0, ge=0, le=65535, description="Serve the topics live to Foxglove on this port (0 = off; e.g. 8765)."
    )
    foxglove_host: str = Field("127.0.0.1", description="Address the Foxglove server listens on.")
    heavy_rate_hz: float = Field(
        1.0, gt=0.0, description="Images and point clouds are kept at most this often per topic, Hz."
    )
    dataset_rate_hz: float = Field(
        0.0,
        ge=0.0,
        description="> 0: also record what `python -m carryon_policy.bag_dataset` makes a LeRobotDataset of (both "
        "cameras the learned policy reads, joint_states, the released chunks, the plan) and keep those cameras at "
        "least this often, Hz (the control rate, e.g. 20); 0 = off.",
    )
    audit: bool = Field(True, description="Write the audit log (hash-chained JSONL) of every decision seen.")
    audit_file: str = Field("", description="Audit log ('' = audit.jsonl next to the bag, in the run folder).")
    audit_key_file: str = Field(
        "~/.local/state/carryon/audit.key",
        description="Key of the audit log's MACs, kept outside the run folder (made on first use, mode 600; "
        "'' = no MACs, the hash chain only).",
    )
    publishers_file: str = Field(
        "",
        description=(
            "Public keys of the nodes whose decisions the audit accepts ('<node:name> <base64 Ed25519 key>' per "
            "line): a plan state, shield event, verdict, memory change or e-stop state not signed by its node is "
            "logged as `forged`, never as that node's decision ('' = none given: `carryon up` and the launch file "
            "make one per run; without one, decisions are logged unverified and the status says so)."
        ),
    )
    discovery_period_s: float = Field(1.0, gt=0.0, description="How often to look for topics not yet seen, s.")


def recorded_topics(config: RecorderConfig) -> list[str]:
    """The topics to record: `topics`, plus what a dataset needs when `dataset_rate_hz` > 0."""
    extra = DATASET_TOPICS + DATASET_CAMERAS if config.dataset_rate_hz > 0 else []
    return list(dict.fromkeys([*config.topics, *extra]))


def keep_period_ns(config: RecorderConfig, topic: str, namespace: str) -> float:
    """The least time between two kept images or clouds on `topic`: 1 / `heavy_rate_hz`;
    for the dataset's cameras 0.9 / `dataset_rate_hz` when that is more often (the slack: a
    camera publishing at exactly that rate jitters, and a strict spacing would keep every
    other frame)."""
    period = 1e9 / config.heavy_rate_hz
    if config.dataset_rate_hz > 0 and topic in {qualified(namespace, t) for t in DATASET_CAMERAS}:
        return min(period, 0.9e9 / config.dataset_rate_hz)
    return period


def qualified(namespace: str, topic: str) -> str:
    """`/namespace/topic` for a relative name; absolute names unchanged."""
    return topic if topic.startswith("/") else names.qualify(namespace, topic)


def interface_msg_files(share_dirs: list[Path]) -> dict[str, str]:
    """`pkg/msg/Name` -> .msg text for every message under the given package share folders."""
    out = {}
    for share in share_dirs:
        for path in sorted((share / "msg").glob("*.msg")):
            out[f"{share.name}/msg/{path.stem}"] = path.read_text(encoding="utf-8")
    return out


def typestore_for(share_dirs: list[Path]) -> Any:
    """rosbags' ROS 2 Kilted typestore plus the messages of the given interface packages
    (message definitions and hashes for the bag and Foxglove; deserialization for reports)."""
    store = get_typestore(Stores.ROS2_KILTED)
    custom: dict[str, Any] = {}
    for type_name, text in interface_msg_files(share_dirs).items():
        custom.update(get_types_from_msg(text, type_name))
    store.register(custom)
    return store
