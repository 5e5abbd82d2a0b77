"""Geometric action shield: grounding, response model, filter and retreat."""
