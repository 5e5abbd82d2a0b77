"""Timing of one policy inference (core form of InferenceTiming)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InferenceRecord:
    """infer_s: backend call wall time; observation_age_s: observation age when inference
    started; server_infer_s: time reported by a remote server (0 when none). Seconds."""

    chunk_id: int
    backend: str
    infer_s: float
    observation_age_s: float
    server_infer_s: float = 0.0
