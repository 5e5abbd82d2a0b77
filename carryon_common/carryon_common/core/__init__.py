"""Pure-Python helpers shared by every CarryOn package (never imports rclpy)."""
