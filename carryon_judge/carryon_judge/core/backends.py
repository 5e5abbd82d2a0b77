"""Judge backends chosen by name: `geometric` (here) and `vlm` (vlm.py).

`make_judge(config)` builds one from a JudgeConfig; nodes and benchmarks receive the
result (inject, don't construct), so tests pass fakes in. The simulator's ground-truth
judge (SIMULATOR ORACLE) is no runtime backend: it lives in the harness
(`carryon_sim.harness.oracle`) and subclasses `RuleJudge`.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from carryon_common.core.clouds import ObservationUnusable
from carryon_common.core.config import NodeConfig, under_config_dir
from carryon_common.core.registry import Registry
from carryon_judge.core.config import JudgeConfig
from carryon_judge.core.geometry import ShapeTable, load_shapes
from carryon_judge.core.perception import PerceptionParams, facts_from_perception
from carryon_judge.core.rules import Decision, Goal, RuleParams, SceneFacts, decide, goal_of
from carryon_judge.core.types import Judge, JudgeError, JudgeRequest, JudgeVerdict, Observation, unable


class RuleJudge:
    """Shared by geometric and the harness's oracle: facts from an observation, then `rules.decide`."""

    backend = ""

    def __init__(self, shapes: ShapeTable, rules: RuleParams) -> None:
        self.shapes = shapes
        self.rules = rules

    @property
    def name(self) -> str:
        return self.backend

    def facts(self, observation: Observation) -> SceneFacts:
        raise NotImplementedError

    def _label(self, reason: str) -> str:
        return reason

    def judge(self, request: JudgeRequest) -> JudgeVerdict:
        spec = goal_of(request.subtask, self.shapes.role)
        try:
            if spec.goal != Goal.UNSUPPORTED:
                base, now = self.facts(request.baseline), self.facts(request.current)
                cover_radius = self.shapes.get(spec.target).radius_m if spec.goal == Goal.UNCOVER else 0.0
                decision = decide(spec, base, now, request.since_progress_s, self.rules, cover_radius_m=cover_radius)
            else:
                empty = SceneFacts({}, self.backend)
                decision = decide(spec, empty, empty, request.since_progress_s, self.rules)
        # KeyError: UnknownNameError for an object without a shape
        except (JudgeError, ObservationUnusable, KeyError) as exc:
            return unable(request, self.backend, self._label(str(exc)))
        return self._verdict(request, decision)

    def _verdict(self, request: JudgeRequest, decision: Decision) -> JudgeVerdict:
        return JudgeVerdict(
            subtask_id=request.subtask.id,
            status=decision.status,
            reason=self._label(decision.reason),
            backend=self.backend,
            revealed_contents=decision.revealed,
            scene_update_required=decision.scene_update_required,
            confidence=1.0,
            observation_id=request.current.observation_id,
        )


class GeometricJudge(RuleJudge):
    """Masks + depth + the gripper's state; no model. Works on a robot with any instance
    segmentation that publishes a label table."""

    backend = "geometric"

    def __init__(self, shapes: ShapeTable, rules: RuleParams, perception: PerceptionParams) -> None:
        super().__init__(shapes, rules)
        self.perception = perception

    def facts(self, observation: Observation) -> SceneFacts:
        return facts_from_perception(observation, self.shapes, self.perception, self.backend)


def shapes_for(config: JudgeConfig) -> ShapeTable:
    """The object shape table of `config.geometry_file` (relative to the config folder)."""
    return load_shapes(under_config_dir(config.geometry_file))


def rule_params(config: JudgeConfig) -> RuleParams:
    return RuleParams(stuck_timeout_s=config.stuck_timeout_s)


def perception_params(config: JudgeConfig) -> PerceptionParams:
    return PerceptionParams(stride=config.pixel_stride, min_points=config.min_points, open_width_m=config.open_width_m)


def _geometric(config: JudgeConfig) -> Judge:
    return GeometricJudge(shapes_for(config), rule_params(config), perception_params(config))


def _vlm(config: JudgeConfig) -> Judge:
    from carryon_judge.core.vlm import VlmJudge, VlmParams, vlm_client

    key = os.environ.get(config.vlm_api_key_env, "") if config.vlm_api_key_env else ""
    if not config.vlm_base_url:
        raise JudgeError("vlm judge: vlm_base_url is empty (e.g. http://127.0.0.1:8080/v1)")
    return VlmJudge(vlm_client(config, api_key=key), VlmParams.from_config(config))


JUDGES: Registry[Callable[[JudgeConfig], Judge]] = Registry("judge backend")
JUDGES.register("geometric", _geometric)
JUDGES.register("vlm", _vlm)


def make_judge(config: NodeConfig) -> Judge:
    """The backend `config.backend` names (UnknownNameError suggests the closest name)."""
    assert isinstance(config, JudgeConfig)
    return JUDGES.get(config.backend)(config)
