from __future__ import annotations

import pytest
from builtin_interfaces.msg import Time
from pydantic import ValidationError

from carryon_policy import convert
from carryon_policy.core.config import PolicyConfig
from carryon_policy.core.timing import InferenceRecord


def test_steps_per_inference_cannot_exceed_the_horizon() -> None:
    with pytest.raises(ValidationError, match=r"steps_per_inference \(20\) must not exceed chunk_horizon \(16\)"):
        PolicyConfig(steps_per_inference=20, chunk_horizon=16)


def test_unknown_backend_lists_the_valid_ones() -> None:
    with pytest.raises(ValidationError, match="valid: lerobot_local, openpi_remote, sim_scripted, sim_scripted_safe"):
        PolicyConfig(backend="pi0")


def test_timing_message_carries_every_figure() -> None:
    msg = convert.timing_to_msg(InferenceRecord(4, "sim_scripted", 0.012, 0.03, 0.01), Time(sec=2))
    assert (msg.chunk_id, msg.backend, msg.infer_s, msg.observation_age_s, msg.server_infer_s) == (
        4, "sim_scripted", 0.012, 0.03, 0.01,
    )  # fmt: skip


def test_the_policy_package_never_names_the_simulator() -> None:
    """carryon_policy is a runtime package: no import of carryon_sim, lazy or by a module-name
    string (the scripted stand-ins reach the backend registry through an entry point)."""
    import ast
    from pathlib import Path

    package = Path(convert.__file__).resolve().parent
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.value] if isinstance(node, ast.Constant) and isinstance(node.value, str) else []
            found += [(path.relative_to(package).as_posix(), n) for n in names if n.startswith("carryon_sim")]
    assert found == []
