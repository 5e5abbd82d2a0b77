from __future__ import annotations

import pytest
from pydantic import ValidationError

from carryon_planner import convert
from carryon_planner.core.config import PlannerConfig
from carryon_planner.core.types import SubtaskKind, SubtaskSpec


def test_subtask_round_trips_through_message() -> None:
    spec = SubtaskSpec(
        "s2", SubtaskKind.VLA, "carrot in bowl", "put the carrot in the bowl", "carrot", "kitchen_counter", "bowl",
        ("s1",), "carrot under pink_cover",
    )  # fmt: skip
    assert convert.subtask_from_msg(convert.subtask_to_msg(spec)) == spec


def test_unknown_kind_in_message_is_refused() -> None:
    msg = convert.subtask_to_msg(SubtaskSpec("s1", SubtaskKind.SAY))
    msg.kind = "teleport"
    with pytest.raises(ValueError, match="teleport"):
        convert.subtask_from_msg(msg)


def test_llm_backend_typo_suggests_the_closest_name() -> None:
    with pytest.raises(ValidationError, match="did you mean 'openai'"):
        PlannerConfig(llm_backend="opnai")
