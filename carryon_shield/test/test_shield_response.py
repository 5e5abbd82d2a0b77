"""Response model: prediction, fit from logged motion, file round trip, delta chunks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from shield_fixtures import DOWN, DOWN_ROTVEC

from carryon_common.core.chunk import Chunk, ChunkSource, Convention
from carryon_common.core.errors import ConfigError
from carryon_shield.core.response import ResponseModel, commanded_poses, fit_lag, load_response_model


def simulate(alpha: np.ndarray, beta: np.ndarray, steps: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    commanded = np.cumsum(rng.normal(0.0, 0.01, (steps, 3)), axis=0)
    achieved = np.zeros((steps, 3))
    x, previous = np.zeros(3), np.zeros(3)
    for t in range(steps):
        x, previous = x + alpha * (commanded[t] - x) + beta * (x - previous), x
        achieved[t] = x
    return commanded, achieved


def test_identity_model_puts_the_tool_where_it_was_commanded() -> None:
    commanded = np.array([[0.1, 0.0, 0.5], [0.2, 0.0, 0.5]])
    assert np.allclose(ResponseModel.identity().predict(commanded, np.zeros(3), np.zeros(3)), commanded)


def test_lag_model_trails_the_commands() -> None:
    model = ResponseModel(np.full(3, 0.5), np.zeros(3))
    predicted = model.predict(np.tile([0.1, 0.0, 0.0], (3, 1)), np.zeros(3), np.zeros(3))
    assert np.allclose(predicted[:, 0], [0.05, 0.075, 0.0875])


def test_fit_recovers_a_known_lag_from_logged_motion() -> None:
    alpha, beta = np.array([0.4, 0.6, 0.5]), np.array([0.3, 0.1, 0.2])
    commanded, achieved = simulate(alpha, beta, 600, np.random.default_rng(0))
    model = fit_lag(commanded, achieved, np.zeros(600, dtype=int), dt=0.05)
    assert np.allclose(model.alpha, alpha, atol=1e-6) and np.allclose(model.beta, beta, atol=1e-6)
    assert model.rmse_m < 1e-9 < model.baseline_rmse_m


def test_fit_ignores_transitions_across_segments() -> None:
    commanded, achieved = simulate(np.full(3, 0.5), np.zeros(3), 100, np.random.default_rng(1))
    achieved[50:] += 1.0  # a jump between two logged runs
    segment = np.repeat([0, 1], 50)
    model = fit_lag(commanded - np.where(segment[:, None] == 1, -1.0, 0.0), achieved, segment, dt=0.05)
    assert np.allclose(model.alpha, 0.5, atol=1e-6)
    with pytest.raises(ValueError, match="too few"):
        fit_lag(commanded[:5], achieved[:5], np.zeros(5, dtype=int), dt=0.05)


def test_model_file_round_trip_and_errors(tmp_path: Path) -> None:
    model = ResponseModel(np.array([0.4, 0.5, 0.6]), np.array([0.1, 0.2, 0.3]), 0.05, 0.001, 0.002, 100)
    path = tmp_path / "model.yaml"
    path.write_text(model.to_yaml())
    loaded = ResponseModel.load(path)
    assert np.allclose(loaded.alpha, model.alpha) and loaded.samples == 100
    path.write_text("alpha: [1, 2]\n")
    with pytest.raises(ConfigError, match="not a response model"):
        ResponseModel.load(path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_response_model(str(tmp_path / "missing.yaml"))


def test_the_shipped_fitted_model_loads(repo_root: Path) -> None:
    model = ResponseModel.load(repo_root / "config" / "shield" / "response_model.yaml")
    assert model.samples > 1000 and model.rmse_m < model.baseline_rmse_m


def test_delta_steps_accumulate_from_the_base() -> None:
    chunk = Chunk(1, "s", ChunkSource.POLICY, Convention.DELTA, "world", 0.05, 1, 0.0,
                  np.tile([0.01, 0.0, 0.0], (3, 1)), np.zeros((3, 3)), np.zeros(3))  # fmt: skip
    positions, rotations = commanded_poses(chunk, np.array([0.5, 0.0, 0.6]), DOWN)
    assert np.allclose(positions[:, 0], [0.51, 0.52, 0.53]) and np.allclose(rotations, DOWN)
    absolute = Chunk(1, "s", ChunkSource.POLICY, Convention.ABSOLUTE, "world", 0.05, 1, 0.0,
                     np.tile([0.5, 0.0, 0.6], (2, 1)), np.tile(DOWN_ROTVEC, (2, 1)), np.zeros(2))  # fmt: skip
    positions, rotations = commanded_poses(absolute, np.zeros(3), np.eye(3))
    assert np.allclose(positions, [0.5, 0.0, 0.6]) and np.allclose(rotations, DOWN, atol=1e-9)
