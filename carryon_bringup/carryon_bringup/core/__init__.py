"""Graph description and process supervision (never imports rclpy)."""
