"""Graph description, process supervision and benchmark plumbing (never imports rclpy)."""
