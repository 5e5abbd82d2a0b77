"""SIMULATOR ORACLE judge: the judge's rules on simulator ground truth (benchmarks, tests).

Not a runtime backend: judge_node reads no `sim/truth`. The harness fills
`Observation.truth` (`harness.observation.observe_world`) and this judge decides from it
with the same `rules.decide` the geometric judge uses, so their agreement measures
perception (`carryon bench judge`). Every reason starts with ORACLE_LABEL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from carryon_common.core.names import ORACLE_LABEL
from carryon_judge.core.backends import RuleJudge
from carryon_judge.core.geometry import ObjectShape, ShapeTable
from carryon_judge.core.perception import facts_from_truth
from carryon_judge.core.rules import SceneFacts
from carryon_judge.core.types import JudgeError, Observation

if TYPE_CHECKING:
    from carryon_sim.core.scene import Scene


class SimOracleJudge(RuleJudge):
    """SIMULATOR ORACLE: the same rules on simulator ground truth (benchmarks, labels)."""

    backend = "sim_oracle"

    def facts(self, observation: Observation) -> SceneFacts:
        if observation.truth is None:
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
