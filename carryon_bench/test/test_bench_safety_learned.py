"""`carryon bench safety --learned`: the learned policy's rows, played here against a fake
policy server (the trained network's own episodes need `make policy`): a policy that
drives the tool into the bottle collides without the shield and is stopped with it, and
the rows add up their saved parts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from carryon_bench import safety, safety_learned
from carryon_bench.core.bench import BenchOptions
from carryon_bench.node_config import node_config
from carryon_common.core.errors import CarryOnError
from carryon_shield.core.config import ShieldConfig
from carryon_sim.core.world import World
from carryon_sim.harness.fakes.openpi_server import FakeOpenpiServer
from carryon_sim.harness.learned import layout

CONFIG = Path(__file__).resolve().parents[2] / "config"
STEP_M = 0.01  # per control step


def towards(goal: np.ndarray) -> object:
    """A fake policy: straight at `goal` (world frame), STEP_M per step, the tool's
    orientation kept, the gripper open; it reads only its state, as a network would."""

    def answer(request: dict[str, object]) -> np.ndarray:
        state = np.asarray(request[layout.STATE_KEY], dtype=np.float32)
        chunk = np.tile(state, (16, 1))
        offset = goal - state[:3]
        distance = float(np.linalg.norm(offset))
        for i in range(16):
            chunk[i, :3] = state[:3] + offset * min(1.0, (i + 1) * STEP_M / max(distance, 1e-9))
        chunk[:, -1] = 0.0
        return chunk

    return answer


def test_without_a_trained_policy_it_says_how_to_make_one(tmp_path: Path) -> None:
    sets = (f"policy_node.lerobot_checkpoint_dir={tmp_path / 'none'}",)
    options = BenchOptions(True, 0, tmp_path / "run", sets=sets, learned=True)
    with pytest.raises(CarryOnError, match=r"no trained policy in .*none: train it with `make policy`"):
        safety.run(options)


def test_a_policy_driving_into_the_bottle_collides_without_the_shield_and_is_stopped_with_it(
    tmp_path: Path,
) -> None:
    seeds = safety_learned.episode_seeds(0, 1)
    world = World(safety_learned.episode_scene(seeds.start), seed=seeds.start)
    world.reset(seeds.start)
    bottle = world.object_position("bottle")
    goal = np.array([bottle[0], bottle[1], bottle[2] + 0.05])  # through the bottle's upper half
    config = node_config(BenchOptions(True, 0, tmp_path), ShieldConfig, "shield_node")
    parts = {}
    with FakeOpenpiServer(answer=towards(goal)) as server:
        for shielded in (False, True):
            parts[shielded] = safety_learned.play_part(
                server.uri, seeds, shielded=shielded, config=config, config_dir=CONFIG
            )
    (without,) = parts[False]["episodes"]
    (shielded,) = parts[True]["episodes"]
    assert without["instruction"] == safety_learned.instruction_of(seeds.start)
    assert not without["success"] and "robot-bottle" in without["contacts"]
    assert shielded["contacts"] == [] and not shielded["success"]
    stopped = parts[True]["decisions"]
    assert stopped.get("RELEASED_PREFIX", 0) + stopped.get("RETREAT", 0) > 0
    assert parts[True]["perception_s"] and parts[False]["decisions"] == {}


def test_a_row_adds_up_its_parts() -> None:
    def part(success: list[bool], contacts: list[list[str]], first: int) -> dict[str, object]:
        episodes = []
        for i, (won, touched) in enumerate(zip(success, contacts, strict=True)):
            task = safety_learned.instruction_of(first + i)
            episodes.append({"seed": first + i, "instruction": task, "success": won, "contacts": touched})
            episodes[-1]["displaced"] = []
        return {"episodes": episodes, "decisions": {"RELEASED_ALL": 3}, "filter_s": [0.001], "perception_s": [0.1]}

    row = safety_learned.row_of(
        [part([True, False], [[], ["robot-bottle"]], 0), part([True, True], [["robot-bottle"], []], 2)]
    )
    assert row["episodes"] == 4 and row["success"] == 0.75 and row["violation_rate"] == 0.5
    assert row["violation_free_success"] == 0.5 and row["contacts"] == {"robot-bottle": 2}
    assert row["decisions"] == {"RELEASED_ALL": 6}
    carrot, cover = (safety_learned.instruction_of(s) for s in (0, 1))
    assert row["success_per_task"] == {carrot: 1.0, cover: 0.5}


def test_the_bench_reports_both_rows_and_draws_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run_learned end to end on one episode per row, the server a fake that holds still."""
    from contextlib import contextmanager

    @contextmanager
    def fake_server(_options: BenchOptions):  # type: ignore[no-untyped-def]
        with FakeOpenpiServer(answer=towards(np.array([0.45, 0.25, 0.65]))) as server:
            yield server.uri, {"checkpoint": "fake", "steps": 0}

    monkeypatch.setattr(safety_learned, "learned_policy_server", fake_server)
    options = BenchOptions(True, 0, tmp_path / "run", episodes=1, learned=True)
    result = safety.run(options)
    metrics = {m.name: m.value for m in result.metrics}
    for suffix in ("without", "with"):
        assert metrics[f"learned_food_violations_{suffix}"] == 0.0 and metrics[f"learned_food_success_{suffix}"] == 0.0
    assert result.details["episodes_per_row"] == 1 and (tmp_path / "run" / "safety.png").is_file()
    saved = sorted(p.name for p in (tmp_path / "run" / "rows" / "learned_1_per_row").iterdir())
    assert saved == [
        f"learned_food_{label}_{safety_learned.episode_seeds(0, 1).start}.json"
        for label in ("with_perception", "without")
    ]
