"""Judge core: verdict rules and backends (never imports rclpy)."""
