"""Response model: where the tool will be while the arm executes a chunk.

The arm does not jump to each commanded target: its servos lag behind and carry
momentum. Per axis, a first-order lag with a momentum term, fitted from logged
commanded-vs-achieved tool motion (`python -m carryon_sim.harness.fit_response`):

    x[k+1] = x[k] + alpha * (c[k] - x[k]) + beta * (x[k] - x[k-1])

x: achieved tool position after step k, c[k]: the target commanded during step k (one
control period), both world frame, metres. The history term starts from the measured
velocity. Orientation follows the commanded rotation (its lag is small for the hand's
nearly symmetric geometry and ignored). With alpha = 1, beta = 0 the model is "the tool
is where it was commanded".
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from scipy.spatial.transform import Rotation

from carryon_common.core.chunk import Chunk, Convention
from carryon_common.core.errors import ConfigError
from carryon_shield.core.types import FloatArray


@dataclass(frozen=True)
class ResponseModel:
    """alpha, beta: (3,) per world axis, per control step of `dt` seconds."""

    alpha: FloatArray
    beta: FloatArray
    dt: float = 0.05
    rmse_m: float = float("nan")  # one-step prediction error on the fitting data
    baseline_rmse_m: float = float("nan")  # the same for "achieved = commanded"
    samples: int = 0

    @classmethod
    def identity(cls, dt: float = 0.05) -> ResponseModel:
        return cls(np.ones(3), np.zeros(3), dt)

    def predict(self, commanded: FloatArray, position: FloatArray, velocity: FloatArray) -> FloatArray:
        """Achieved positions (n, 3) after each of n steps commanded to `commanded` (n, 3),
        from `position` (3,) moving at `velocity` (3,) m/s."""
        out = np.empty_like(commanded)
        x = np.asarray(position, dtype=np.float64)
        previous = x - np.asarray(velocity, dtype=np.float64) * self.dt
        for k in range(len(commanded)):
            x, previous = x + self.alpha * (commanded[k] - x) + self.beta * (x - previous), x
            out[k] = x
        return out

    def to_yaml(self) -> str:
        data = {
            "model": "first_order_lag_with_momentum",
            "dt_s": self.dt,
            "alpha": [round(float(v), 6) for v in self.alpha],
            "beta": [round(float(v), 6) for v in self.beta],
            "fit": {
                "samples": self.samples,
                "rmse_m": float(self.rmse_m),
                "baseline_rmse_m": float(self.baseline_rmse_m),
            },
        }
        return yaml.safe_dump(data, sort_keys=False)

    @classmethod
    def load(cls, path: Path) -> ResponseModel:
        """Read a fitted model; ConfigError naming the file when it is malformed."""
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
            alpha = np.asarray(data["alpha"], dtype=np.float64)
            beta = np.asarray(data["beta"], dtype=np.float64)
            fit = data.get("fit", {})
            model = cls(
                alpha,
                beta,
                float(data["dt_s"]),
                float(fit.get("rmse_m", "nan")),
                float(fit.get("baseline_rmse_m", "nan")),
                int(fit.get("samples", 0)),
            )
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{path}: not a response model: {exc}") from None
        if alpha.shape != (3,) or beta.shape != (3,) or not (np.all(alpha > 0) and np.all(alpha <= 2)):
            raise ConfigError(f"{path}: alpha and beta need 3 values each, alpha in (0, 2]")
        return model


def fit_lag(commanded: FloatArray, achieved: FloatArray, segment: np.ndarray, dt: float) -> ResponseModel:
    """Least-squares fit of alpha, beta per axis.

    commanded[t]: the target during step t (T, 3); achieved[t]: the tool position after
    step t (T, 3); segment[t]: run id (T,) — transitions are only used inside one run
    (consecutive steps t-1, t, t+1 of the same segment)."""
    same = (segment[2:] == segment[1:-1]) & (segment[1:-1] == segment[:-2])
    x_prev, x, x_next = achieved[:-2][same], achieved[1:-1][same], achieved[2:][same]
    c = commanded[2:][same]
    if len(x) < 10:
        raise ValueError(f"too few samples to fit a response model: {len(x)}")
    alpha, beta = np.ones(3), np.zeros(3)
    for axis in range(3):
        features = np.column_stack([c[:, axis] - x[:, axis], x[:, axis] - x_prev[:, axis]])
        (alpha[axis], beta[axis]), *_ = np.linalg.lstsq(features, x_next[:, axis] - x[:, axis], rcond=None)
    predicted = x + alpha * (c - x) + beta * (x - x_prev)
    rmse = float(np.sqrt(np.mean(np.sum((predicted - x_next) ** 2, axis=1))))
    baseline = float(np.sqrt(np.mean(np.sum((c - x_next) ** 2, axis=1))))
    return ResponseModel(alpha, beta, dt, rmse, baseline, len(x))


def response_model_path(configured: str = "") -> Path:
    """The response model file: `configured`, else
    `<$CARRYON_CONFIG_DIR or ./config>/shield/response_model.yaml`."""
    if configured:
        return Path(configured)
    return Path(os.environ.get("CARRYON_CONFIG_DIR", "config")) / "shield" / "response_model.yaml"


def load_response_model(configured: str = "", dt: float = 0.05) -> tuple[ResponseModel, str]:
    """The fitted model and where it came from; the identity model (with the reason)
    when no file exists. A malformed file raises ConfigError."""
    path = response_model_path(configured)
    if not path.is_file():
        if configured:
            raise ConfigError(f"response model file {path} does not exist")
        return ResponseModel.identity(dt), f"no {path}: lag-free model (run python -m carryon_sim.harness.fit_response)"
    return ResponseModel.load(path), str(path)


def rotvec_to_matrices(rotvecs: FloatArray) -> FloatArray:
    """(n, 3) rotation vectors -> (n, 3, 3) matrices."""
    matrices: FloatArray = Rotation.from_rotvec(rotvecs).as_matrix()
    return matrices


def commanded_poses(
    chunk: Chunk, base_position: FloatArray, base_rotation: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Absolute targets of every step: positions (n, 3), rotations (n, 3, 3), world frame.
    Delta steps accumulate from the base (the driver's current target, or the measured
    pose when that is unknown), the way the driver reads them."""
    steps = rotvec_to_matrices(chunk.rotations)
    if chunk.convention == Convention.ABSOLUTE:
        return np.asarray(chunk.positions, dtype=np.float64), steps
    positions = base_position + np.cumsum(chunk.positions, axis=0)
    rotations = np.empty_like(steps)
    current = base_rotation
    for k in range(len(chunk)):
        current = steps[k] @ current
        rotations[k] = current
    return positions, rotations
