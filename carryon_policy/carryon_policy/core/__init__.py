"""Policy interface and backends (never imports rclpy)."""
