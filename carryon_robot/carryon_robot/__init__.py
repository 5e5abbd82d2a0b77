"""The robot model every capability shares: URDF, kinematics and IK, the hand's geometry."""
