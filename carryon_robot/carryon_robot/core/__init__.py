"""The robot model without ROS: kinematics from the URDF, hand and finger geometry, clearances."""
