"""Arm adapter logic without ROS: kinematics, chunk execution, camera bridging."""
