"""QoS by topic kind: the one table CarryOn's publishers and subscriptions take their QoS from.

DDS connects a publisher and a subscription only when their QoS is compatible: a reliable
subscription gets nothing from a best-effort publisher, a transient-local one nothing from a
volatile publisher ("No messages will be sent"). Both ends of every graph topic take their
profile from `qos_for(topic)`, so every pair in the graph is compatible by construction:
test_qos_table checks that the table names every topic and that no runtime module passes a
QoS of its own, and the graph tests look for incompatible pairs in the running graph
(`carryon_common.qos_audit`) on both profiles. The topics of other software (a controller's
state and command topics, a camera driver's images) take the profile of their kind from
`qos_of`. The recorder takes the QoS its publishers offer (`recording_qos`), as rosbag2 does.

| kind    | reliability | durability      | depth | topics                                              |
|---------|-------------|-----------------|-------|-----------------------------------------------------|
| sensor  | best effort | volatile        | 5     | camera images (colour, depth, segmentation)         |
| state   | reliable    | volatile        | 10    | measurements: joints, poses, widths, camera info, scene, heartbeat |
| command | reliable    | volatile        | 10    | action chunks (policy, recovery, released)          |
| latched | reliable    | transient local | 1     | the last value is the state: e-stop, plan state     |
| events  | reliable    | volatile        | 100   | decisions and records: shield events, verdicts, memory changes |
"""

from __future__ import annotations

import enum
import re

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from carryon_common.core import names


class TopicKind(enum.Enum):
    SENSOR = "sensor"  # a late frame is worth less than the next one: best effort, a short queue
    STATE = "state"  # every sample counts for fusion and stamps, but only the recent ones
    COMMAND = "command"  # a lost chunk is a lost motion: reliable
    LATCHED = "latched"  # a late subscriber needs the current value: transient local
    EVENTS = "events"  # bursts of decisions that records and recovery must not miss: a long queue


_PROFILES = {
    TopicKind.SENSOR: (ReliabilityPolicy.BEST_EFFORT, DurabilityPolicy.VOLATILE, 5),
    TopicKind.STATE: (ReliabilityPolicy.RELIABLE, DurabilityPolicy.VOLATILE, 10),
    TopicKind.COMMAND: (ReliabilityPolicy.RELIABLE, DurabilityPolicy.VOLATILE, 10),
    TopicKind.LATCHED: (ReliabilityPolicy.RELIABLE, DurabilityPolicy.TRANSIENT_LOCAL, 1),
    TopicKind.EVENTS: (ReliabilityPolicy.RELIABLE, DurabilityPolicy.VOLATILE, 100),
}

# Every topic of the graph, by its name relative to the graph's namespace.
TOPICS: dict[str, TopicKind] = {
    names.PLAN_STATE: TopicKind.LATCHED,
    names.MEMORY_CHANGED: TopicKind.EVENTS,
    names.POLICY_CHUNK: TopicKind.COMMAND,
    names.POLICY_TIMING: TopicKind.EVENTS,
    names.POLICY_DROPPED: TopicKind.EVENTS,
    names.SHIELD_CHUNK: TopicKind.COMMAND,
    names.SHIELD_EVENTS: TopicKind.EVENTS,
    names.SHIELD_MARKERS: TopicKind.STATE,
    names.SHIELD_OBSTACLES: TopicKind.STATE,
    names.ESTOP_STATE: TopicKind.LATCHED,
    names.SHIELD_HEARTBEAT: TopicKind.STATE,
    names.VERDICT: TopicKind.EVENTS,
    names.RECOVERY_CHUNK: TopicKind.COMMAND,
    names.PERCEPTION_SCENE: TopicKind.STATE,
    names.SIM_TRUTH: TopicKind.STATE,
    names.JOINT_STATES: TopicKind.STATE,
    names.EE_POSE: TopicKind.STATE,
    names.GRIPPER_WIDTH: TopicKind.STATE,
    names.DRIVER_REJECTIONS: TopicKind.EVENTS,
    "/clock": TopicKind.STATE,  # the simulator's clock (absolute: ROS's own name)
}

# camera/<name>/<stream> and the simulator's oracle sim/camera/<name>/<stream>, by stream.
CAMERA_STREAMS: dict[str, TopicKind] = {
    "color": TopicKind.SENSOR,
    "depth": TopicKind.SENSOR,
    "segmentation": TopicKind.SENSOR,
    "labels": TopicKind.STATE,  # each labels message goes with one segmentation image: reliable
    "camera_info": TopicKind.STATE,
    "pose": TopicKind.STATE,
}
_CAMERA = re.compile(r"^(?:sim/)?camera/[^/]+/(?P<stream>[a-z_]+)$")


def qos_of(kind: TopicKind, depth: int | None = None) -> QoSProfile:
    """The profile of `kind` (a new object); `depth` changes only the queue length, which
    never makes a pair incompatible."""
    reliability, durability, default_depth = _PROFILES[kind]
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=default_depth if depth is None else depth,
        reliability=reliability,
        durability=durability,
    )


def kind_of(topic: str) -> TopicKind:
    """The kind of a graph topic named relative to the namespace (`joint_states`,
    `camera/wrist/depth`); ValueError for a name the table does not hold."""
    if topic in TOPICS:
        return TOPICS[topic]
    match = _CAMERA.match(topic)
    if match and match["stream"] in CAMERA_STREAMS:
        return CAMERA_STREAMS[match["stream"]]
    raise ValueError(f"topic {topic!r} is not in carryon_common.qos's table: add it with its kind")


def qos_for(topic: str, depth: int | None = None) -> QoSProfile:
    """The profile both ends of graph topic `topic` use (see `kind_of`)."""
    return qos_of(kind_of(topic), depth)


def qos_for_qualified(topic: str, namespace: str, default: TopicKind | None = None) -> QoSProfile:
    """`qos_for` of an absolute name under `/namespace` (a bag's or a tool's names); names
    outside the table get `default`'s profile, or raise ValueError without one."""
    prefix = "/" + namespace.strip("/") + "/"
    relative = topic[len(prefix) :] if namespace.strip("/") and topic.startswith(prefix) else topic
    try:
        return qos_for(relative)
    except ValueError:
        if default is None:
            raise
        return qos_of(default)
