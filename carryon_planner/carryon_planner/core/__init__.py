"""Planning loop core: context, plan schema, validator, executive (never imports rclpy)."""
