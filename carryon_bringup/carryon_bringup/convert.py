"""Where bringup's types meet ROS messages: nothing of its own. Node status, plan and
subtask state names convert in carryon_common.convert, shared with recovery_node."""
