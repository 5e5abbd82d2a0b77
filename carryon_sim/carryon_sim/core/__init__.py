"""Simulated world core: MuJoCo scenes, sensors, driver logic (never imports rclpy)."""
