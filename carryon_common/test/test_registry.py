from __future__ import annotations

import pytest

from carryon_common.core.errors import UnknownNameError
from carryon_common.core.registry import Registry


def test_lookup_and_names() -> None:
    registry: Registry[int] = Registry("backend")
    registry.register("sim_scripted", 1)
    registry.register("openpi_remote", 2)
    assert registry.get("openpi_remote") == 2
    assert registry.names() == ["openpi_remote", "sim_scripted"]
    assert "sim_scripted" in registry
    assert len(registry) == 2


def test_unknown_name_lists_valid_ones_and_suggests_closest() -> None:
    registry: Registry[int] = Registry("policy backend")
    registry.register("sim_scripted", 1)
    registry.register("openpi_remote", 2)
    with pytest.raises(UnknownNameError) as info:
        registry.get("sim_scripte")
    message = str(info.value)
    assert "unknown policy backend 'sim_scripte'" in message
    assert "valid: openpi_remote, sim_scripted" in message
    assert "did you mean 'sim_scripted'" in message


def test_duplicate_registration_is_refused() -> None:
    registry: Registry[int] = Registry("benchmark")
    registry.register("graph", 1)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("graph", 2)
