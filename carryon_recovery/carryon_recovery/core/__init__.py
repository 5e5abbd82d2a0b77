"""Recovery core: base skill, versioned library, reflection (never imports rclpy)."""
