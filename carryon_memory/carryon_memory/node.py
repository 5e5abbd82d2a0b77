"""memory_node: serves user and scene memory to the planner and the operator.

Services (relative names, see carryon_common.core.names): memory/get_context,
memory/update_user, memory/update_scene, memory/remember_image, memory/history (which
also restores a version), memory/get_reference_images (the remembered images with their
bytes, for perception's catalog). Every committed change is published on memory/changed.

The Markdown store (`carryon_memory.core.store.MemoryStore`) is injected; by default it
is built from the parameters. Reads run concurrently on the node's reentrant group;
writes are serialised on their own group and never wait for the cross-process lock
longer than `lock_timeout_s` (then STATUS_UNAVAILABLE), so the executor is never held
for long and get_context keeps answering while a write waits.

Memory files with malformed lines are served as far as they parse and never rewritten:
the node reports them in its status (DEGRADED) and answers writes to them with
STATUS_READ_ONLY and `file:line: reason`.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup

from carryon_common.core import names
from carryon_common.core.errors import CarryOnError
from carryon_common.core.status import NodeState, ServiceStatus, implemented
from carryon_common.node import CarryOnNode, run_node
from carryon_common.qos import qos_for
from carryon_common.request_auth import EVERY_USER, OPERATOR_OR_PLANNER, Unauthorized, sign_decision
from carryon_interfaces.msg import MemoryChange, MemoryFact, SceneLocation
from carryon_interfaces.srv import (
    GetContext,
    GetReferenceImages,
    MemoryHistory,
    RememberImage,
    UpdateScene,
    UpdateUser,
)
from carryon_memory import convert
from carryon_memory.core.config import MemoryConfig, resolve_seed_dir
from carryon_memory.core.errors import InvalidArgument, LockTimeout, NotFound, ReadOnly
from carryon_memory.core.files import SCENE_FILE, USERS_DIR, user_file
from carryon_memory.core.others import others
from carryon_memory.core.seed import seed_from
from carryon_memory.core.store import MemoryStore
from carryon_memory.core.types import Change, Context, SceneUpdate

CAPABILITIES = (
    implemented("memory.get_context", "the user's facts (only theirs) + shared scene memory, rendered for the planner"),
    implemented("memory.update_user", "durable user facts replace the superseded value; history kept"),
    implemented("memory.update_scene", "observation-driven scene updates: set contents, move or remove an item"),
    implemented("memory.remember_image", "PNG/JPEG reference images stored as entity attributes"),
    implemented("memory.history", "journal of every change; restore a version (recorded as a new change)"),
    implemented("memory.reference_images", "remembered images with their bytes, for perception's object catalog"),
)

# Store errors -> service status. Anything else is an internal error (logged with its traceback).
_STATUS: tuple[tuple[type[Exception], ServiceStatus], ...] = (
    (InvalidArgument, ServiceStatus.INVALID_ARGUMENT),
    (NotFound, ServiceStatus.NOT_FOUND),
    (ReadOnly, ServiceStatus.READ_ONLY),
    (LockTimeout, ServiceStatus.UNAVAILABLE),
    (Unauthorized, ServiceStatus.UNAUTHORIZED),
)
_MAX_PROBLEMS_SHOWN = 5


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


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


# Observation stamps before 2000-01-01 come from a clock that is not the wall clock (the
# simulator's, which starts at 0 with every run): scene memory outlives the run, so such
# an observation is recorded at the wall-clock time of the update instead.
_WALL_CLOCK_EPOCH_S = 946_684_800.0


def _wall_clock(update: SceneUpdate, now: float) -> SceneUpdate:
    if 0.0 < update.observed_s < _WALL_CLOCK_EPOCH_S:
        return dataclasses.replace(update, observed_s=now)
    return update


class MemoryNode(CarryOnNode):
    def __init__(self, store: MemoryStore | None = None, **node_kwargs: Any) -> None:
        super().__init__(names.MEMORY_NODE, MemoryConfig, capabilities=CAPABILITIES, **node_kwargs)
        config: MemoryConfig = self.config
        if store is None:
            store = MemoryStore(
                ensure_memory_dir(Path(config.memory_dir)),
                lock_timeout_s=config.lock_timeout_s,
                max_value_chars=config.max_value_chars,
                max_image_bytes=config.max_image_bytes,
            )
        self.store = store
        self.memory_dir = store.root
        self._recoveries_logged = 0
        self._log_recoveries()
        self._seed(resolve_seed_dir(config.seed_dir))

        # Who may read and write (operators_file: self.requests, CarryOnNode): operators for the users their
        # line grants, planner_node (and perception_node for reference images) for every user.
        assert self.requests is not None
        if not self.requests.secured:
            self.get_logger().warning(self.requests.describe())
        self.changed_pub = self.create_publisher(MemoryChange, names.MEMORY_CHANGED, qos_for(names.MEMORY_CHANGED))
        # user_id -> (context, its facts and scene as messages): conversion is a third of a request's cost.
        self._converted: dict[str, tuple[Context, list[MemoryFact], list[SceneLocation]]] = {}
        writes = MutuallyExclusiveCallbackGroup()
        self.create_service(
            GetContext, names.MEMORY_GET_CONTEXT, self._on_get_context, callback_group=self.service_group
        )
        self.create_service(UpdateUser, names.MEMORY_UPDATE_USER, self._on_update_user, callback_group=writes)
        self.create_service(UpdateScene, names.MEMORY_UPDATE_SCENE, self._on_update_scene, callback_group=writes)
        self.create_service(RememberImage, names.MEMORY_REMEMBER_IMAGE, self._on_remember_image, callback_group=writes)
        self.create_service(MemoryHistory, names.MEMORY_HISTORY, self._on_history, callback_group=writes)
        self.create_service(
            GetReferenceImages,
            names.MEMORY_GET_REFERENCE_IMAGES,
            self._on_get_reference_images,
            callback_group=self.service_group,
        )
        if config.rescan_period_s > 0.0:
            self.create_timer(
                config.rescan_period_s, self.refresh_health, callback_group=MutuallyExclusiveCallbackGroup()
            )
        self.refresh_health()

    # -- start-up and health ----------------------------------------------------------
    def _seed(self, seed_dir: Path | None) -> None:
        if seed_dir is None:
            return
        if not seed_dir.is_dir():
            self.get_logger().warning(f"seed_dir {seed_dir} does not exist: starting without seed data")
            return
        changes = seed_from(self.store, seed_dir, time.time())
        if changes:
            files = ", ".join(c.file for c in changes)
            self.get_logger().info(f"new memory folder seeded from {seed_dir}: {files}")

    def _log_recoveries(self) -> None:
        """Log what the store repaired after a writer (this or another process) died mid-commit."""
        for line in self.store.recovered[self._recoveries_logged :]:
            self.get_logger().warning(f"memory recovered: {line}")
        self._recoveries_logged = len(self.store.recovered)

    def refresh_health(self) -> None:
        """READY, or DEGRADED listing every malformed line (those files are read-only)."""
        self._log_recoveries()
        try:
            problems = self.store.problems()
        except OSError as exc:
            self.set_state(NodeState.ERROR, f"memory {self.memory_dir} unreadable: {exc}")
            return
        if not problems:
            self.set_state(NodeState.READY, f"serving memory in {self.memory_dir}")
            return
        shown = "; ".join(str(p) for p in problems[:_MAX_PROBLEMS_SHOWN])
        more = f" (+{len(problems) - _MAX_PROBLEMS_SHOWN} more)" if len(problems) > _MAX_PROBLEMS_SHOWN else ""
        self.set_state(
            NodeState.DEGRADED,
            f"serving memory in {self.memory_dir} with {_plural(len(problems), 'problem')}; files with malformed "
            f"lines are served as far as they parse and read-only until repaired (`carryon memory repair --all`, "
            f"`--dry-run` first shows what it would change) or fixed by hand: {shown}{more}",
        )

    # -- services ---------------------------------------------------------------------
    def _answer(self, response: Any, what: str, handle: Callable[[], str]) -> Any:
        """Run `handle` (which fills `response` and returns the message); map store errors to statuses."""
        try:
            response.message = handle()
            response.status = int(ServiceStatus.OK)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a status; unexpected ones are logged
            status = next((s for kind, s in _STATUS if isinstance(exc, kind)), ServiceStatus.INTERNAL_ERROR)
            response.status = int(status)
            response.message = str(exc) or type(exc).__name__
            if status == ServiceStatus.INTERNAL_ERROR:
                self.get_logger().error(f"{what} failed: {exc}\n{traceback.format_exc()}")
            elif status == ServiceStatus.READ_ONLY:
                self.refresh_health()
        return response

    def _publish(self, changes: Sequence[Change]) -> None:
        self._log_recoveries()
        for change in changes:
            self.changed_pub.publish(sign_decision(self.identity, convert.change_to_msg(change), names.MEMORY_CHANGED))

    def _version_after(self, changes: Sequence[Change]) -> int:
        return changes[-1].version if changes else self.store.version()

    def _on_get_context(self, request: GetContext.Request, response: GetContext.Response) -> GetContext.Response:
        def handle() -> str:
            self.requests.principal(request, OPERATOR_OR_PLANNER, user=request.user_id or None)
            temporary = [convert.fact_from_msg(m) for m in request.temporary_facts]
            context = self.store.context(request.user_id, temporary)
            cached = self._converted.get(request.user_id)
            # The store answers unchanged files with the same facts and scene, also at a new version.
            same = cached is not None and cached[0].facts is context.facts and cached[0].scene is context.scene
            if not same or context.temporary:
                cached = (
                    context,
                    [convert.fact_to_msg(f) for f in (*context.facts, *context.temporary)],
                    [convert.location_to_msg(loc) for loc in context.scene],
                )
                if not context.temporary:
                    if len(self._converted) >= 1024:
                        self._converted.clear()
                    self._converted[request.user_id] = cached
            response.user_facts, response.scene = cached[1], cached[2]
            response.rendered = context.rendered
            response.version = context.version
            apart = others(self.store, request.user_id)  # for the planner's cross-user checks; never rendered
            response.others_token = apart.token
            response.others_unchanged = request.others_token == apart.token  # the caller's copy holds
            if not response.others_unchanged:
                response.other_users, response.foreign_values = list(apart.users), list(apart.foreign_values)
            parts = []
            if request.user_id:
                who = f"user {request.user_id!r}"
                if not context.known_user:
                    parts.append(f"{who} has no memory yet")
                else:
                    parts.append(f"{who}: {_plural(len(context.facts), 'fact')}")
                if context.temporary:
                    parts.append(f"{len(context.temporary)} temporary")
            parts.append(f"scene: {_plural(len(context.scene), 'location')}")
            message = ", ".join(parts) + (
                f"; rendered {context.chars} chars, ~{context.tokens} tokens (chars/4); version {context.version}"
            )
            if context.problems:
                message += f"; {_plural(len(context.problems), 'malformed line')} left out: {context.problems[0]}"
            return message

        return self._answer(response, "get_context", handle)

    def _on_update_user(self, request: UpdateUser.Request, response: UpdateUser.Response) -> UpdateUser.Response:
        def handle() -> str:
            source = _by(request.source, self.requests.principal(request, user=request.user_id))
            facts = [convert.fact_from_msg(m) for m in request.facts]
            changes = self.store.update_user(request.user_id, facts, source, time.time())
            self._publish(changes)
            response.version = self._version_after(changes)
            if not changes:
                return f"no change: {user_file(request.user_id)} already holds these values"
            return f"{_plural(len(changes), 'change')} to {user_file(request.user_id)}, version {response.version}"

        return self._answer(response, "update_user", handle)

    def _on_update_scene(self, request: UpdateScene.Request, response: UpdateScene.Response) -> UpdateScene.Response:
        def handle() -> str:
            principal, now = self.requests.principal(request), time.time()
            updates = [_wall_clock(convert.scene_update_from_msg(m), now) for m in request.updates]
            updates = [dataclasses.replace(u, source=_by(u.source, principal)) for u in updates]
            changes = self.store.update_scene(updates, now)
            self._publish(changes)
            response.version = self._version_after(changes)
            if not changes:
                return "no change: scene memory already says this"
            where = ", ".join(dict.fromkeys(c.entity for c in changes))
            return f"{_plural(len(changes), 'change')} to scene.md ({where}), version {response.version}"

        return self._answer(response, "update_scene", handle)

    def _on_remember_image(
        self, request: RememberImage.Request, response: RememberImage.Response
    ) -> RememberImage.Response:
        def handle() -> str:
            path, changes = self.store.remember_image(
                request.user_id,
                entity=request.entity,
                key=request.key,
                image_format=request.image.format,
                data=bytes(request.image.data),
                source=_by(request.source, self.requests.principal(request, user=request.user_id)),
                now=time.time(),
            )
            self._publish(changes)
            response.path = path
            response.version = self._version_after(changes)
            return f"image stored as {path} ({request.entity}.{request.key} of {request.user_id!r})"

        return self._answer(response, "remember_image", handle)

    def _on_get_reference_images(
        self, request: GetReferenceImages.Request, response: GetReferenceImages.Response
    ) -> GetReferenceImages.Response:
        def handle() -> str:
            self.requests.principal(request, _IMAGE_READERS, user=request.user_id or EVERY_USER)
            found = self.store.reference_images(request.user_id)
            response.images = [convert.stored_image_to_msg(image) for image in found.images]
            response.left_out = [str(problem) for problem in found.problems]
            response.version = found.version
            whose = f"user {request.user_id!r}" if request.user_id else "every user"
            size = sum(len(image.data) for image in found.images)
            message = f"{_plural(len(found.images), 'image')} of {whose} ({size} bytes), version {found.version}"
            if found.problems:
                shown = "; ".join(str(p) for p in found.problems[:_MAX_PROBLEMS_SHOWN])
                more = len(found.problems) - _MAX_PROBLEMS_SHOWN
                message += f"; {_plural(len(found.problems), 'image')} left out: {shown}"
                message += f" (+{more} more)" if more > 0 else ""
            return message

        return self._answer(response, "get_reference_images", handle)

    def _on_history(self, request: MemoryHistory.Request, response: MemoryHistory.Response) -> MemoryHistory.Response:
        def handle() -> str:
            message = ""
            # A restore, or the whole journal, concerns every user; a user's file that user.
            whose = EVERY_USER if request.restore_version > 0 or not request.file else _file_user(request.file)
            principal = self.requests.principal(request, user=whose)
            if request.restore_version > 0:
                restored = self.store.restore(request.restore_version, time.time(), by=principal)
                self._publish(restored)
                if restored:
                    files = ", ".join(c.file for c in restored)
                    message = f"restored version {request.restore_version} ({files}); "
                else:
                    message = f"the files already match version {request.restore_version}; nothing restored; "
            changes = self.store.history(request.file, request.limit)
            response.changes = [convert.change_to_msg(c) for c in changes]
            response.version = self.store.version()
            return message + f"{_plural(len(changes), 'change')} shown, version {response.version}"

        return self._answer(response, "history", handle)


# Who may read memory: operators (for the users their line grants) and planner_node; perception_node
# reads every user's reference images for its catalog.
_IMAGE_READERS = (*OPERATOR_OR_PLANNER, f"node:{names.PERCEPTION_NODE}")


def _file_user(file: str) -> str | None:
    """Whose file `file` (relative to the memory folder) is: a user's memory or images, None for the
    scene (every operator's), EVERY_USER for anything else (what is not known to be one user's)."""
    parts = PurePosixPath(file).parts
    if parts == (SCENE_FILE,):
        return None
    if len(parts) == 2 and parts[0] == USERS_DIR:
        return PurePosixPath(parts[1]).stem
    if len(parts) >= 3 and parts[0] == names.MEMORY_IMAGES_DIR:
        return parts[1]
    return EVERY_USER


def _by(source: str, principal: str) -> str:
    """The source a change is recorded with: the claimed one, and who proved to ask in brackets."""
    return f"{source or 'unknown'} [{principal}]" if principal else source


def main() -> int:
    return run_node(MemoryNode)
