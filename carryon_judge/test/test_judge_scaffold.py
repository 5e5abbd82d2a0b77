from __future__ import annotations

from builtin_interfaces.msg import Time

from carryon_judge import convert
from carryon_judge.core.types import JudgeVerdict, VerdictStatus


def test_verdict_round_trips_through_message() -> None:
    verdict = JudgeVerdict(
        "s1", VerdictStatus.SUCCESS, "cover moved; meat revealed", "geometric", ("meat",), True, 0.75, 12
    )
    assert convert.verdict_from_msg(convert.verdict_to_msg(verdict, Time())) == verdict
