"""Configuration of memory_node."""

from __future__ import annotations

from pydantic import Field

from carryon_common.core.config import NodeConfig


class MemoryConfig(NodeConfig):
    memory_dir: str = Field(
        "memory",
        description="Directory holding users/, scene.md, images/ and the journal; relative paths are "
        "resolved against the node's working directory (the workspace root under `carryon up`).",
    )
    lock_timeout_s: float = Field(5.0, gt=0.0, description="Longest wait for the cross-process write lock, seconds.")
    max_image_bytes: int = Field(5_000_000, gt=0, description="Largest reference image accepted, bytes.")
    max_value_chars: int = Field(2000, gt=0, description="Longest fact value accepted, characters.")
