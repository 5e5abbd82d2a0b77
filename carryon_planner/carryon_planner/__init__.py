"""Personalized planner: context, LLM backends, plan schema, validator and repair, executive."""
