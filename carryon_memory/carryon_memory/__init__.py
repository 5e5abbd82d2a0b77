"""Persistent Markdown user and scene memory and the memory service node."""
