"""The one place where memory core types meet ROS messages."""

from __future__ import annotations

from builtin_interfaces.msg import Time as TimeMsg

from carryon_interfaces.msg import MemoryFact, SceneLocation
from carryon_memory.core.types import Fact, Location


def fact_from_msg(msg: MemoryFact) -> Fact:
    return Fact(entity=msg.entity, key=msg.key, value=msg.value, durable=msg.durable, source=msg.source)


def fact_to_msg(fact: Fact) -> MemoryFact:
    return MemoryFact(entity=fact.entity, key=fact.key, value=fact.value, durable=fact.durable, source=fact.source)


def location_to_msg(location: Location) -> SceneLocation:
    sec = int(location.observed_s)
    return SceneLocation(
        name=location.name,
        contents=list(location.contents),
        observed=TimeMsg(sec=sec, nanosec=int((location.observed_s - sec) * 1e9)),
        source=location.source,
    )


def location_from_msg(msg: SceneLocation) -> Location:
    return Location(
        name=msg.name,
        contents=tuple(msg.contents),
        observed_s=msg.observed.sec + msg.observed.nanosec * 1e-9,
        source=msg.source,
    )
