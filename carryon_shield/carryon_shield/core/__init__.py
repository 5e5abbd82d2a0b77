"""Shield core: grounding, response model, filter, retreat (never imports rclpy)."""
