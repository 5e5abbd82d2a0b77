"""The benchmarks' plumbing and scorers that need no ROS (never imports rclpy): the registry and
result records (`bench.py`), the personalization suites and their scoring (`personalization_score.py`)."""
