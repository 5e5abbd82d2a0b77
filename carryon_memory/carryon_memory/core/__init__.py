"""Markdown memory store (pure Python; never imports rclpy)."""
