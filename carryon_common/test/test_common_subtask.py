from __future__ import annotations

import pytest

from carryon_common import convert
from carryon_common.core.subtask import Subtask, SubtaskKind


def test_subtask_round_trips_through_message() -> None:
    spec = Subtask(
        "s2",
        SubtaskKind.VLA,
        "carrot in bowl",
        "put the carrot in the bowl",
        "carrot",
        "kitchen_counter",
        "bowl",
        ("s1",),
        "carrot under pink_cover",
    )
    assert convert.subtask_from_msg(convert.subtask_to_msg(spec)) == spec


def test_unknown_kind_in_message_is_refused_with_the_valid_ones() -> None:
    msg = convert.subtask_to_msg(Subtask("s1", SubtaskKind.SAY))
    msg.kind = "teleport"
    with pytest.raises(ValueError, match=r"teleport.*one of vla, observe, say, control"):
        convert.subtask_from_msg(msg)
