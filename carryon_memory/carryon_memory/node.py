"""memory_node: serves user and scene memory to the planner and the operator.

Scaffolding: the Markdown store arrives with issue #5. The node already checks that
its memory directory is usable, so a misconfigured path fails at start-up, not at the
first request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from carryon_common.core import names
from carryon_common.core.errors import CarryOnError
from carryon_common.core.status import planned
from carryon_common.node import CarryOnNode, run_node
from carryon_interfaces.srv import GetContext, MemoryHistory, RememberImage, UpdateScene, UpdateUser
from carryon_memory.core.config import MemoryConfig

CAPABILITIES = (
    planned("memory.get_context", 5, "render the active user's memory plus scene memory for the planner"),
    planned("memory.update_user", 5, "durable user facts with history"),
    planned("memory.update_scene", 5, "observation-driven scene updates"),
    planned("memory.remember_image", 5, "reference images stored as entity attributes"),
    planned("memory.history", 5, "journal of every change, restore a version"),
)


class MemoryDirError(CarryOnError):
    """The configured memory directory cannot be created or written."""


def ensure_memory_dir(path: Path) -> Path:
    """Create `path` if needed and check it is a writable directory; return it resolved."""
    path = path.expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise MemoryDirError(f"memory_dir {path}: not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MemoryDirError(f"memory_dir {path}: cannot create: {exc.strerror}") from None
    probe = path / ".write_probe"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise MemoryDirError(f"memory_dir {path}: not writable: {exc.strerror}") from None
    return path


class MemoryNode(CarryOnNode):
    def __init__(self, **node_kwargs: Any) -> None:
        super().__init__(names.MEMORY_NODE, MemoryConfig, capabilities=CAPABILITIES, **node_kwargs)
        self.memory_dir = ensure_memory_dir(Path(self.config.memory_dir))
        self.serve_not_implemented(GetContext, names.MEMORY_GET_CONTEXT, "memory.get_context")
        self.serve_not_implemented(UpdateUser, names.MEMORY_UPDATE_USER, "memory.update_user")
        self.serve_not_implemented(UpdateScene, names.MEMORY_UPDATE_SCENE, "memory.update_scene")
        self.serve_not_implemented(RememberImage, names.MEMORY_REMEMBER_IMAGE, "memory.remember_image")
        self.serve_not_implemented(MemoryHistory, names.MEMORY_HISTORY, "memory.history")
        self.set_ready()


def main() -> int:
    return run_node(MemoryNode)
