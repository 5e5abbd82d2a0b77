"""Every core enum whose docstring says it mirrors an interface's constants ("Mirrors
PlanState.STATE_*.") holds exactly those names and values: core code compares with them
and nodes cast them with int(), so a renumbered message must fail here, not in the field."""

from __future__ import annotations

import ast
import enum
import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MIRROR = re.compile(r"^Mirrors (?P<type>[A-Z]\w*(?:\.[A-Z]\w*)?)\.(?P<prefix>[A-Z]+)_\*")


def _mirrors() -> list[tuple[str, str, str, str]]:
    """(module, enum class, interface type, constant prefix) for every mirroring enum."""
    found = []
    for path in sorted(REPO.glob("carryon_*/carryon_*/core/**/*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and (match := MIRROR.match(ast.get_docstring(node) or "")):
                module = ".".join(path.relative_to(path.parents[2]).with_suffix("").parts)
                found.append((module, node.name, match["type"], match["prefix"]))
    return found


def _interface(type_name: str) -> type:
    """`PlanState` (a message), `Assist.Result` (an action's part), `Judge.Response` (a service's)."""
    head, _, part = type_name.partition(".")
    for kind in ("msg", "action", "srv"):
        package = importlib.import_module(f"carryon_interfaces.{kind}")
        if hasattr(package, head):
            cls = getattr(package, head)
            return getattr(cls, part) if part else cls
    raise AssertionError(f"no interface named {head}")


MIRRORS = _mirrors()


def test_the_mirroring_enums_are_found() -> None:
    assert {(m[1], m[2]) for m in MIRRORS} >= {("Phase", "PlanState"), ("Status", "Assist.Result")}


@pytest.mark.parametrize(("module", "name", "type_name", "prefix"), MIRRORS, ids=str)
def test_core_enum_equals_the_interface_constants(module: str, name: str, type_name: str, prefix: str) -> None:
    mirrored = getattr(importlib.import_module(module), name)
    assert issubclass(mirrored, enum.Enum)
    interface = _interface(type_name)
    constants = {k.removeprefix(f"{prefix}_"): v for k, v in vars(interface).items() if k.startswith(f"{prefix}_")}
    ours = {member.name: member.value for member in mirrored}
    for key, value in ours.items():
        assert key in constants, f"{name}.{key}: {type_name} has no {prefix}_{key}"
        assert constants[key] == value, f"{name}.{key} = {value!r}, {type_name}.{prefix}_{key} = {constants[key]!r}"
