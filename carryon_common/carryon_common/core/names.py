"""Names of topics, services and actions, relative to the graph namespace.

Every node is started in the namespace `/carryon` (configurable); names here are
relative so the whole graph can be remapped. Node-private names start with `~/`.
"""

from __future__ import annotations

DEFAULT_NAMESPACE = "carryon"

# Environment variable `carryon up` sets to its pid in every node's environment: a node
# that sees it exits when the launcher dies (no orphans).
LAUNCHER_PID_ENV = "CARRYON_LAUNCHER_PID"
# Environment variable `carryon up` sets to the run folder (logs, records of this run).
RUN_DIR_ENV = "CARRYON_RUN_DIR"
# Environment variable naming the graph.yaml profile: read by `carryon up` / `carryon status`
# as the default profile, and set by the launchers in every node's environment, so a node
# reports the profile it runs in (`carryon status` finds the running profile from it).
PROFILE_ENV = "CARRYON_PROFILE"
# SCHED_FIFO priority of a node's control path, from graph.yaml (carryon_common.scheduling)
REALTIME_PRIORITY_ENV = "CARRYON_REALTIME_PRIORITY"

# Nodes of the graph (the `name` of each entry in config/graph.yaml).
MEMORY_NODE = "memory_node"
PLANNER_NODE = "planner_node"
POLICY_NODE = "policy_node"
SHIELD_NODE = "shield_node"
JUDGE_NODE = "judge_node"
RECOVERY_NODE = "recovery_node"
SIM_NODE = "sim_node"
ARM_ADAPTER_NODE = "arm_adapter_node"
RECORDER_NODE = "recorder_node"
PERCEPTION_NODE = "perception_node"
LLM_SERVER_NODE = "llm_server_node"

# Every node: readiness / health check (carryon_interfaces/srv/GetStatus).
GET_STATUS = "~/get_status"

# Planner: operator requests.
ASK = "planner/ask"  # srv Ask
ASSIST = "planner/assist"  # action Assist
PLAN_STATE = "planner/plan_state"  # msg PlanState

# Memory.
MEMORY_GET_CONTEXT = "memory/get_context"  # srv GetContext
MEMORY_UPDATE_USER = "memory/update_user"  # srv UpdateUser
MEMORY_UPDATE_SCENE = "memory/update_scene"  # srv UpdateScene
MEMORY_REMEMBER_IMAGE = "memory/remember_image"  # srv RememberImage
MEMORY_GET_REFERENCE_IMAGES = "memory/get_reference_images"  # srv GetReferenceImages (perception's catalog)
MEMORY_HISTORY = "memory/history"  # srv MemoryHistory
MEMORY_CHANGED = "memory/changed"  # msg MemoryChange, one per committed change
# A remembered image's fact value is its path under this folder of the memory directory
# ("images/<user>/..."): memory/changed consumers tell image changes by it.
MEMORY_IMAGES_DIR = "images"

# Policy.
RUN_POLICY = "policy/run"  # action RunPolicy
POLICY_CHUNK = "policy/chunk"  # msg ActionChunk (unshielded)
POLICY_TIMING = "policy/timing"  # msg InferenceTiming
POLICY_DROPPED = "policy/dropped"  # std_msgs/String, why a backend output was dropped (not published)

# Shield: the only path to the robot driver.
SHIELD_SET_TASK = "shield/set_task"  # srv SetTask
SHIELD_CHUNK = "shield/chunk"  # msg ActionChunk (released; the driver executes only these)
SHIELD_EVENTS = "shield/events"  # msg ShieldEvent
SHIELD_MARKERS = "shield/markers"  # visualization_msgs/MarkerArray
SHIELD_OBSTACLES = "shield/obstacles"  # sensor_msgs/PointCloud2, the obstacle set (world frame)
ESTOP_SET = "estop/set"  # srv SetEstop
ESTOP_STATE = "estop/state"  # msg EstopState, transient local, signed by the shield
SHIELD_HEARTBEAT = "shield/heartbeat"  # msg EstopState, the shield's signed state every heartbeat_period_s
DRIVER_ESTOP_SET = "driver/estop/set"  # srv SetEstop, engage only: every robot driver's own e-stop
RUN_COMMAND_KEY = "keys/command.key"  # the per-run command key `carryon up` makes, under the run folder

# Judge.
JUDGE = "judge/judge"  # srv Judge
VERDICT = "judge/verdict"  # msg Verdict

# Recovery.
RECOVER = "recovery/recover"  # action Recover
LOOK_SKILL = "look"  # Recover skill: the wrist camera over the goal's target location (the planner's observe)

# Perception: camera/<name>/segmentation + labels (below) and the fused scene.
PERCEPTION_SCENE = "perception/scene"  # msg PerceivedScene: objects (label, track id, points, support, region), planes

# Simulator (robot driver + cameras + ground truth).
SIM_RESET = "sim/reset"  # srv SimReset
SIM_PERTURB = "sim/perturb"  # srv SimPerturb
SIM_STATE = "sim/state"  # srv SimState
SIM_SET_TASK = "sim/set_task"  # srv SetTask: what the contact monitor permits
SIM_TRUTH = "sim/truth"  # msg SimTruth, at the camera rate


def sim_truth_camera_topic(camera: str, stream: str) -> str:
    """`sim/camera/<camera>/<stream>` (segmentation, labels): the simulator's own labelled
    masks, an evaluation oracle for benchmarks and tests, never read by the runtime."""
    return f"sim/camera/{camera}/{stream}"


# Robot driver (sim_node or a real arm adapter): robot state and cameras.
JOINT_STATES = "joint_states"  # sensor_msgs/JointState (arm + finger joints)
EE_POSE = "ee_pose"  # geometry_msgs/PoseStamped, tool centre point in "world"
GRIPPER_WIDTH = "gripper/width"  # std_msgs/Float64, metres between the fingers
DRIVER_REJECTIONS = "driver/rejections"  # std_msgs/String, why a released step was not executed
CAMERAS = ("scene", "wrist")  # camera names; topics below are camera/<name>/...


def camera_topic(camera: str, stream: str) -> str:
    """`camera/<camera>/<stream>`, stream one of color, depth, segmentation, labels, camera_info, pose."""
    return f"camera/{camera}/{stream}"


def status_service(namespace: str, node_name: str) -> str:
    """Fully qualified name of a node's GetStatus service, e.g. `/carryon/memory_node/get_status`."""
    return f"{qualify(namespace, node_name)}/{GET_STATUS.removeprefix('~/')}"


def qualify(namespace: str, name: str) -> str:
    """Join a namespace and a relative name into an absolute ROS name."""
    namespace = namespace.strip("/")
    name = name.strip("/")
    return f"/{namespace}/{name}" if namespace else f"/{name}"


# Recovery motions enter the shield here (the same filter as policy chunks).
RECOVERY_CHUNK = "recovery/chunk"  # msg ActionChunk (unshielded)

# What starts every report made from simulator ground truth (the planner's sim/truth observe,
# the harness's oracle judge): never mistaken for perception.
ORACLE_LABEL = "SIMULATOR ORACLE"
