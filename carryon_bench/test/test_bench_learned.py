"""`carryon bench learned` and `recovery --natural` without a trained policy: they say how
to make one (the episodes themselves: carryon_sim/test/test_learned_policy.py, with the
LeRobot extra)."""

from __future__ import annotations

from pathlib import Path

import pytest

from carryon_bench import learned, recovery
from carryon_bench.core.bench import BenchOptions
from carryon_common.core.errors import CarryOnError


@pytest.mark.parametrize("bench", [learned.run, recovery.run], ids=["learned", "recovery --natural"])
def test_the_bench_names_what_to_do_when_there_is_no_trained_policy(bench: object, tmp_path: Path) -> None:
    options = BenchOptions(
        True, 0, tmp_path / "run", sets=(f"policy_node.lerobot_checkpoint_dir={tmp_path / 'none'}",), natural=True
    )
    with pytest.raises(CarryOnError, match=r"no trained policy in .*none: train it with `make policy`"):
        bench(options)  # type: ignore[operator]


def test_the_checkpoint_is_make_policys_unless_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CARRYON_CACHE_DIR", str(tmp_path))
    assert learned.checkpoint_of(BenchOptions(True, 0, tmp_path)) == tmp_path / "policies" / "act_food_serving-s0"
    chosen = BenchOptions(True, 0, tmp_path, sets=("policy_node.lerobot_checkpoint_dir=~/elsewhere",))
    assert learned.checkpoint_of(chosen) == Path.home() / "elsewhere"
