"""Start the CarryOn graph with `ros2 launch` (robot PCs with ROS 2 installed).

    ros2 launch carryon_bringup carryon.launch.py profile:=robot
    ros2 launch carryon_bringup carryon.launch.py profile:=sim only:=memory_node,planner_node

The node list and parameter files come from config/graph.yaml through the same
`GraphSpec.launches()` that `carryon up` uses; parameters are validated before any
node starts, and a node that exits without a restart policy shuts the launch down.
"""

import tempfile
from pathlib import Path

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction, Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from carryon_bringup.up import command_key_params, load_spec, process_prefix
from carryon_common.core.names import PROFILE_ENV


def _given(key_params, name):
    return [key_params[name]] if name in key_params else []


def _nodes(context, *_args, **_kwargs):
    config_dir = LaunchConfiguration("config_dir").perform(context) or None
    spec = load_spec(config_dir)
    profile = spec.resolve_profile(LaunchConfiguration("profile").perform(context) or None)
    only = [name for name in LaunchConfiguration("only").perform(context).split(",") if name]
    launches = spec.launches(profile, only or None)
    # Fail before starting anything, with file / key / reason.
    resolved = {launch.name: launch.load_config() for launch in launches}
    # Like `carryon up`: nodes started for another node's setting (llm_server_node for a local planner model).
    launches = spec.needed(launches, resolved, named=only)
    resolved = {launch.name: resolved[launch.name] for launch in launches}
    # Like `carryon up`: the keys (carryon_bringup/core/run_keys.py): a new set for this launch
    # (sim), or the robot PC's installed ones, whose absence stops the launch here; nodes that
    # name files of their own keep them; insecure:=true runs without keys on purpose.
    insecure = LaunchConfiguration("insecure").perform(context).lower() in ("1", "true", "yes")
    folder = Path(tempfile.mkdtemp(prefix="carryon-launch-"))
    key_params = command_key_params(spec, profile, resolved, folder, insecure=insecure)
    return [
        Node(
            package=launch.package,
            executable=launch.executable,
            name=launch.name,
            namespace=launch.namespace,
            parameters=[str(path) for path in (*launch.params_files, *_given(key_params, launch.name))],
            output="screen",
            prefix=" ".join(process_prefix(launch)) or None,  # like `carryon up`: `nice`, `realtime_priority`
            emulate_tty=True,
            # Like `carryon up`: each node reports its profile, which `carryon status` looks for.
            additional_env={"CARRYON_CONFIG_DIR": str(spec.config_dir), PROFILE_ENV: profile},
            respawn=launch.restart.max_restarts > 0,
            respawn_max_retries=launch.restart.max_restarts,
            respawn_delay=launch.restart.delay_s,
            # Like `carryon up`: a node that dies for good stops the whole graph.
            on_exit=[Shutdown(reason=f"{launch.name} exited")] if launch.restart.max_restarts == 0 else None,
        )
        for launch in launches
    ]


def generate_launch_description():
    return LaunchDescription(
        [
            DeclareLaunchArgument(
                "profile",
                default_value="",
                description="profile from config/graph.yaml ('' = $CARRYON_PROFILE, else its default_profile)",
            ),
            DeclareLaunchArgument(
                "config_dir",
                default_value="",
                description="folder with graph.yaml ('' = $CARRYON_CONFIG_DIR, ./config, or the installed share copy)",
            ),
            DeclareLaunchArgument("only", default_value="", description="comma-separated node names to start"),
            DeclareLaunchArgument(
                "insecure",
                default_value="false",
                description="true: run without keys on purpose (nothing signed or checked; every node says INSECURE)",
            ),
            OpaqueFunction(function=_nodes),
        ]
    )
