"""SIMULATOR ORACLE judge: the judge's rules on simulator ground truth (benchmarks, tests).

Not a runtime backend: judge_node reads no `sim/truth`. The harness fills
`SimObservation.truth` (`harness.observation.observe_world`) and this judge decides from it
with the same `rules.decide` the geometric judge uses, so their agreement measures
perception (`carryon bench judge`). Every reason starts with ORACLE_LABEL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from carryon_common.core.names import ORACLE_LABEL
from carryon_judge.core.backends import RuleJudge
from carryon_judge.core.geometry import ObjectShape, ShapeTable
from carryon_judge.core.rules import ObjectFacts, SceneFacts
from carryon_judge.core.types import JudgeError, Observation
from carryon_sim.harness.observation import SimObservation, TruthObject

if TYPE_CHECKING:
    from carryon_sim.core.scene import Scene


class SimOracleJudge(RuleJudge):
    """SIMULATOR ORACLE: the same rules on simulator ground truth (benchmarks, labels)."""

    backend = "sim_oracle"

    def facts(self, observation: Observation) -> SceneFacts:
        if not isinstance(observation, SimObservation) or observation.truth is None:
            raise JudgeError("no simulator ground truth in the observation")
        return facts_from_truth(observation.truth, self.shapes, self.backend)

    def _label(self, reason: str) -> str:
        return f"{ORACLE_LABEL}: {reason}"


def scene_shapes(scene: Scene) -> ShapeTable:
    """Shapes of every object of a simulator scene (scaled catalogue geometry): what
    config/judge/sim_objects.yaml must say for the judge to match the simulator."""
    shapes = {
        obj.name: ObjectShape(
            role=obj.kind.role.value,
            radius_m=obj.kind.footprint_m * obj.scale,
            height_m=obj.kind.height_m * obj.scale,
        )
        for obj in scene.spec.objects
    }
    return ShapeTable(shapes, f"scene {scene.spec.name}")


# A cover lifted less than this above an item's top still hides it from the cameras, metres.
COVER_GAP_M = 0.03


def _hidden_by(obj: TruthObject, truth: Mapping[str, TruthObject], shapes: ShapeTable) -> str:
    """The cover hiding `obj`: its covered_by, or a cover over its footprint whose rim is
    still below the item's top + COVER_GAP_M (the simulator's predicate stops counting a
    cover as covering once it is lifted a centimetre; the cameras still see nothing)."""
    if obj.covered_by:
        return obj.covered_by
    shape = shapes.shapes.get(obj.name)
    top = obj.position[2] + (shape.height_m if shape is not None else 0.0)
    for cover in truth.values():
        c = shapes.shapes.get(cover.name)
        if c is None or c.role != "cover" or cover.name == obj.name:
            continue
        distance = float(np.hypot(cover.position[0] - obj.position[0], cover.position[1] - obj.position[1]))
        if distance < c.radius_m and obj.position[2] - 0.01 <= cover.position[2] < top + COVER_GAP_M:
            return cover.name
    return ""


def facts_from_truth(truth: Mapping[str, TruthObject], shapes: ShapeTable, source: str = "sim_oracle") -> SceneFacts:
    """Facts from simulator ground truth: hidden (under a cover, or offstage) objects are
    not visible; each cover knows what it hides."""
    hides: dict[str, set[str]] = {}
    hidden: dict[str, str] = {}
    for obj in truth.values():
        if cover := _hidden_by(obj, truth, shapes):
            hides.setdefault(cover, set()).add(obj.name)
            hidden[obj.name] = cover
    facts = {}
    for obj in truth.values():
        shape = shapes.shapes.get(obj.name)
        height = shape.height_m if shape is not None else 0.0
        role = shape.role if shape is not None else None
        facts[obj.name] = ObjectFacts(
            name=obj.name,
            visible=obj.name not in hidden and not obj.offstage,
            center=np.array(obj.position[:2], dtype=np.float64),
            bottom_z=obj.position[2],
            top_z=obj.position[2] + height,
            held=obj.grasped,
            inside=obj.inside,
            hides=frozenset(hides.get(obj.name, ())) if role == "cover" else None,
        )
    return SceneFacts(facts, source)
