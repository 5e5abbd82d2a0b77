"""The one place where memory core types meet ROS messages."""

from __future__ import annotations

import array

from sensor_msgs.msg import CompressedImage

from carryon_common.convert import time_from_msg, time_to_msg
from carryon_interfaces.msg import MemoryChange, MemoryFact, ReferenceImage, SceneLocation
from carryon_interfaces.msg import SceneUpdate as SceneUpdateMsg
from carryon_memory.core.types import Change, Fact, Location, SceneOp, SceneUpdate, StoredImage


def fact_from_msg(msg: MemoryFact) -> Fact:
    return Fact(entity=msg.entity, key=msg.key, value=msg.value, durable=msg.durable, source=msg.source)


def fact_to_msg(fact: Fact) -> MemoryFact:
    return MemoryFact(entity=fact.entity, key=fact.key, value=fact.value, durable=fact.durable, source=fact.source)


def location_to_msg(location: Location) -> SceneLocation:
    return SceneLocation(
        name=location.name,
        contents=list(location.contents),
        observed=time_to_msg(location.observed_s),
        source=location.source,
    )


def location_from_msg(msg: SceneLocation) -> Location:
    return Location(
        name=msg.name,
        contents=tuple(msg.contents),
        observed_s=time_from_msg(msg.observed),
        source=msg.source,
    )


def scene_update_from_msg(msg: SceneUpdateMsg) -> SceneUpdate:
    """A SceneUpdate message as core data; an unknown op is kept as its number (the store rejects it
    with the index of the update)."""
    return SceneUpdate(
        op=SceneOp(msg.op) if msg.op in set(SceneOp) else msg.op,
        location=msg.location,
        contents=tuple(msg.contents),
        item=msg.item,
        observed_s=time_from_msg(msg.observed),
        source=msg.source,
    )


def change_to_msg(change: Change) -> MemoryChange:
    return MemoryChange(
        version=change.version,
        stamp=time_to_msg(change.time_s),
        file=change.file,
        entity=change.entity,
        key=change.key,
        previous_value=change.previous_value,
        new_value=change.new_value,
        source=change.source,
    )


def stored_image_to_msg(image: StoredImage) -> ReferenceImage:
    """A remembered image with its encoded bytes (CompressedImage format 'png' / 'jpeg')."""
    return ReferenceImage(
        user_id=image.user_id,
        entity=image.entity,
        key=image.key,
        path=image.path,
        # array.array: the message takes it as is (bytes would be checked value by value)
        image=CompressedImage(format=image.image_format, data=array.array("B", image.data)),
    )
