"""Frozen-VLA policy server node and policy backends."""
