"""Configuration of memory_node."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from carryon_common.core.config import under_config_dir
from carryon_common.core.operator_auth import NodeIdentityConfig, OperatorAuthConfig


class MemoryConfig(OperatorAuthConfig, NodeIdentityConfig):
    memory_dir: str = Field(
        "memory",
        description="Directory holding users/, scene.md, images/, history/ and the journal; relative paths are "
        "resolved against the node's working directory (the workspace root under `carryon up`).",
    )
    seed_dir: str = Field(
        "",
        description="Folder with scene.md and users/*.md copied into memory_dir at the first start only (when "
        "memory_dir holds no memory file and no journal; never over existing files). Relative paths are resolved "
        "against the config folder ($CARRYON_CONFIG_DIR, else ./config); '' = no seed data.",
    )
    lock_timeout_s: float = Field(
        5.0, gt=0.0, description="Longest wait for the cross-process write lock, seconds (then STATUS_UNAVAILABLE)."
    )
    max_image_bytes: int = Field(5_000_000, gt=0, description="Largest reference image accepted, bytes.")
    max_value_chars: int = Field(2000, gt=0, description="Longest fact value accepted, characters.")
    rescan_period_s: float = Field(
        5.0,
        ge=0.0,
        description="How often the node re-reads the memory files to report hand-edited, malformed ones in its "
        "status, seconds (0 = only at start-up and after each write).",
    )


def resolve_seed_dir(seed_dir: str) -> Path | None:
    """The seed folder of a config value: None for '', relative paths under the config folder."""
    return under_config_dir(seed_dir) if seed_dir else None
