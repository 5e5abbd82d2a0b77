"""The planner's `Memory` (core/memory_ops.py) over memory_node's services.

A write that memory_node refuses or that cannot reach it is a note, not an error (the
request goes on); a context that cannot be read raises ContextUnavailable with the
memory service's status.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from carryon_common.core import names
from carryon_common.node import CarryOnNode, ServiceUnavailable
from carryon_interfaces.msg import MemoryFact, SceneUpdate
from carryon_interfaces.srv import Ask, GetContext, GetReferenceImages, UpdateScene, UpdateUser
from carryon_planner.core.memory_ops import (
    ContextUnavailable,
    FactWrite,
    MemoryContext,
    ReferenceImage,
    SceneWrite,
    StoredFact,
)

_SCENE_ACTIONS = {
    "set_contents": SceneUpdate.OP_SET_CONTENTS,
    "move_item": SceneUpdate.OP_MOVE_ITEM,
    "remove_item": SceneUpdate.OP_REMOVE_ITEM,
}


class RosMemory:
    """memory_node's get_context / update_user / update_scene, each call bounded by `timeout_s`."""

    def __init__(self, node: CarryOnNode, timeout_s: float, images: bool = False) -> None:
        self.node, self.timeout_s = node, timeout_s
        self.images = images  # also read the user's reference images (llm_images)
        # user id -> (others_token, other users, foreign values): memory_node leaves them out of a
        # reply while they are unchanged (GetContext.others_token).
        self._others: dict[str, tuple[int, tuple[str, ...], tuple[str, ...]]] = {}

    def context(self, user_id: str) -> MemoryContext:
        kept = self._others.get(user_id)
        request = GetContext.Request(user_id=user_id, others_token=kept[0] if kept else 0)
        try:
            answer = self.node.call_service(GetContext, names.MEMORY_GET_CONTEXT, request, self.timeout_s)
        except ServiceUnavailable as exc:
            raise ContextUnavailable(Ask.Response.STATUS_UNAVAILABLE, f"memory: {exc}") from None
        if answer.status != GetContext.Response.STATUS_OK:
            raise ContextUnavailable(answer.status, f"memory: {answer.message}")
        if not answer.others_unchanged:
            kept = (answer.others_token, tuple(answer.other_users), tuple(answer.foreign_values))
            self._others[user_id] = kept
        elif kept is None or kept[0] != answer.others_token:  # the cross-user checks must never run on nothing
            raise ContextUnavailable(
                GetContext.Response.STATUS_INTERNAL_ERROR, "memory left out other users' values this planner lacks"
            )
        return MemoryContext(
            rendered=answer.rendered,
            facts=tuple(StoredFact(f.entity, f.key, f.value) for f in answer.user_facts),
            scene={loc.name: tuple(loc.contents) for loc in answer.scene},
            other_users=kept[1],
            foreign_values=kept[2],
            images=self._images(user_id) if self.images and user_id else (),
        )

    def _images(self, user_id: str) -> tuple[ReferenceImage, ...]:
        """The user's reference images; none when memory_node has none for them."""
        request = GetReferenceImages.Request(user_id=user_id)
        try:
            answer = self.node.call_service(
                GetReferenceImages, names.MEMORY_GET_REFERENCE_IMAGES, request, self.timeout_s
            )
        except ServiceUnavailable as exc:
            raise ContextUnavailable(Ask.Response.STATUS_UNAVAILABLE, f"memory: {exc}") from None
        if answer.status != GetReferenceImages.Response.STATUS_OK:
            return ()
        return tuple(
            ReferenceImage(i.entity, i.key, f"image/{i.image.format}", bytes(i.image.data)) for i in answer.images
        )

    def update_user(self, user_id: str, facts: Sequence[FactWrite], source: str) -> str:
        messages = [MemoryFact(entity=f.entity, key=f.key, value=f.value, durable=True, source=source) for f in facts]
        request = UpdateUser.Request(user_id=user_id, facts=messages, source=source)
        return self._write(UpdateUser, names.MEMORY_UPDATE_USER, request)

    def update_scene(self, updates: Sequence[SceneWrite], source: str) -> str:
        messages = [
            SceneUpdate(
                op=_SCENE_ACTIONS[u.action], location=u.location, contents=list(u.contents), item=u.item, source=source
            )
            for u in updates
        ]
        return self._write(UpdateScene, names.MEMORY_UPDATE_SCENE, UpdateScene.Request(updates=messages))

    def _write(self, srv: Any, name: str, request: Any) -> str:
        try:
            answer = self.node.call_service(srv, name, request, self.timeout_s)
        except ServiceUnavailable as exc:
            return f"memory not updated: {exc}"
        if answer.status == srv.Response.STATUS_OK:
            return "memory: " + answer.message
        return f"memory refused: {answer.message}"
