"""Policy backends by name: the built-in ones, those registered by entry point (found without
importing them, loaded when chosen), the typo suggestion and the errors a broken plugin gives.
The real installed entry points of the simulation harness: carryon_sim/test/test_harness_stand_in.py."""

from __future__ import annotations

import sys
import types
from importlib.metadata import EntryPoint

import pytest
from pydantic import ValidationError

from carryon_common.core.errors import UnknownNameError
from carryon_policy.core import config as config_module
from carryon_policy.core.backends import (
    BACKENDS,
    ENTRY_POINT_GROUP,
    Backend,
    BackendPluginError,
    BackendRegistry,
    make_policy,
)
from carryon_policy.core.config import PolicyConfig
from carryon_policy.core.policy import Policy

PLUGIN_MODULE = "carryon_test_fake_vla"  # a module that exists only in sys.modules, put there by `plugin`


def _entry_point(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)


def _unused(config: PolicyConfig, kinematics: object) -> Policy:
    raise AssertionError("a built-in factory was called")


@pytest.fixture
def plugin(monkeypatch: pytest.MonkeyPatch) -> list[tuple[PolicyConfig, object]]:
    """A fake plugin module whose factory `make` records its calls and returns a sentinel."""
    calls: list[tuple[PolicyConfig, object]] = []
    module = types.ModuleType(PLUGIN_MODULE)

    def make(config: PolicyConfig, kinematics: object) -> Policy:
        """My lab's VLA over gRPC"""
        calls.append((config, kinematics))
        return "the fake policy"  # type: ignore[return-value]

    module.make = make  # type: ignore[attr-defined]
    module.not_a_factory = 3  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, PLUGIN_MODULE, module)
    return calls


def _registry(*entry_points: EntryPoint) -> BackendRegistry:
    return BackendRegistry((Backend("openpi_remote", "built in", _unused),), discover=lambda: entry_points)


def test_an_unknown_name_lists_every_backend_and_suggests_the_closest() -> None:
    registry = _registry(_entry_point("my_vla", f"{PLUGIN_MODULE}:make"))
    with pytest.raises(UnknownNameError, match=r"valid: my_vla, openpi_remote \(did you mean 'openpi_remote'\?\)"):
        registry.get("openpi_remot")
    with pytest.raises(ValidationError, match=r"did you mean 'sim_scripted_safe'\?"):
        PolicyConfig(backend="sim_scripted_saf")


def test_an_entry_point_backend_is_found_by_name_and_loaded_only_when_chosen(plugin: list[object]) -> None:
    discovered = 0

    def discover() -> list[EntryPoint]:
        nonlocal discovered
        discovered += 1
        return [_entry_point("my_vla", f"{PLUGIN_MODULE}:make"), _entry_point("broken", "no_such_module_xyz:make")]

    registry = BackendRegistry((Backend("openpi_remote", "built in", _unused),), discover=discover)
    assert registry.names() == ["broken", "my_vla", "openpi_remote"] and "my_vla" in registry
    assert registry.get("openpi_remote").description == "built in"  # a broken plugin elsewhere does not matter
    backend = registry.get("my_vla")
    assert (backend.name, backend.description) == ("my_vla", "My lab's VLA over gRPC")
    config = PolicyConfig(backend="openpi_remote")
    assert backend.make(config, None) == "the fake policy" and plugin == [(config, None)]
    assert discovered == 1  # metadata is read once per registry


def test_policy_config_accepts_a_backend_an_installed_package_registers(
    plugin: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = _registry(_entry_point("my_vla", f"{PLUGIN_MODULE}:make"))
    monkeypatch.setattr(config_module, "BACKENDS", registry)
    monkeypatch.setattr("carryon_policy.core.backends.BACKENDS", registry)
    config = PolicyConfig(backend="my_vla")
    assert make_policy(config) == "the fake policy" and plugin == [(config, None)]


def test_a_plugin_that_fails_to_import_names_itself_and_its_module() -> None:
    registry = _registry(_entry_point("my_vla", "no_such_module_xyz.sub:make"))
    with pytest.raises(BackendPluginError) as info:
        registry.get("my_vla")
    message = str(info.value)
    assert "'my_vla'" in message and "module 'no_such_module_xyz.sub' failed to import" in message
    assert "no_such_module_xyz.sub:make" in message and ENTRY_POINT_GROUP in message
    assert isinstance(info.value.__cause__, ModuleNotFoundError)


def test_a_plugin_whose_object_is_not_a_factory_is_refused(plugin: list[object]) -> None:
    with pytest.raises(BackendPluginError, match=r"'my_vla': '.*:not_a_factory' is a int, not a factory"):
        _registry(_entry_point("my_vla", f"{PLUGIN_MODULE}:not_a_factory")).get("my_vla")


def test_a_name_registered_twice_is_refused_naming_both(plugin: list[object]) -> None:
    twice = _registry(_entry_point("my_vla", f"{PLUGIN_MODULE}:make"), _entry_point("my_vla", "other_vla:make"))
    with pytest.raises(BackendPluginError, match="registered more than once") as info:
        twice.get("my_vla")
    assert f"{PLUGIN_MODULE}:make" in str(info.value) and "other_vla:make" in str(info.value)
    shadowing = _registry(_entry_point("openpi_remote", f"{PLUGIN_MODULE}:make"))
    with pytest.raises(BackendPluginError, match="built into carryon_policy"):
        shadowing.get("openpi_remote")


def test_the_built_in_backends_need_no_plugin() -> None:
    assert {"openpi_remote", "lerobot_local"} <= set(BACKENDS.names())
