from __future__ import annotations

import pytest
from pydantic import ValidationError

from carryon_planner.core.config import PlannerConfig


def test_llm_backend_typo_suggests_the_closest_name() -> None:
    with pytest.raises(ValidationError, match="did you mean 'openai'"):
        PlannerConfig(llm_backend="opnai")
