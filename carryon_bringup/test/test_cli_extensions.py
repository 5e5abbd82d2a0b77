"""Commands other packages add to `carryon` (cli/extensions.py): found by entry point, in
their place in `carryon --help`, and, when their package is not installed (a robot PC
without the benchmarks), a command that says what to install instead of a usage error."""

from __future__ import annotations

import argparse
from importlib.metadata import EntryPoint
from typing import Any

import pytest

from carryon_bringup.cli import common, extensions
from carryon_bringup.cli.main import _parser, main


def _installed(monkeypatch: pytest.MonkeyPatch, *entries: EntryPoint) -> None:
    def entry_points(group: str) -> tuple[EntryPoint, ...]:
        return entries if group == extensions.GROUP else ()

    monkeypatch.setattr(extensions, "entry_points", entry_points)


def _commands() -> list[str]:
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def test_without_the_benchmarks_carryon_bench_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _installed(monkeypatch)
    assert main(["bench", "safety", "--quick", "--seed", "0"]) == common.EXIT_USAGE
    assert "carryon_bench" in capsys.readouterr().err
    assert main(["bench", "--list"]) == common.EXIT_USAGE
    commands = _commands()
    assert commands.index("keys") + 1 == commands.index("bench") == commands.index("audit") - 1


def test_a_package_that_does_not_import_is_reported_and_the_rest_of_the_cli_works(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _installed(monkeypatch, EntryPoint("bench", "carryon_no_such_package.cli:add_bench", extensions.GROUP))
    assert main(["bench", "graph"]) == common.EXIT_USAGE
    assert "carryon_no_such_package" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["estop", "--no-such-option"])  # a command's unknown option is still a usage error
    assert usage.value.code == common.EXIT_USAGE


def test_a_registered_command_is_added_and_one_without_a_place_comes_last(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    def add_hello(sub: common.Subparsers, parent: argparse.ArgumentParser) -> None:
        hello = sub.add_parser("hello", parents=[parent])
        hello.set_defaults(handler=lambda args: seen.append(args.command) or common.EXIT_OK)

    monkeypatch.setattr(extensions, "_entries", lambda: {"hello": _Loaded("hello", add_hello)})
    assert main(["hello"]) == common.EXIT_OK and seen == ["hello"]
    commands = _commands()
    assert commands[-1] == "hello" and "bench" in commands  # bench's place is kept, its stand-in added
    with pytest.raises(SystemExit):
        main(["hello", "--no-such-option"])


class _Loaded:
    """An entry point whose `load()` gives `value` (no package installed for it)."""

    def __init__(self, name: str, value: Any) -> None:
        self.name, self.value, self._loaded = name, f"test:{name}", value

    def load(self) -> Any:
        return self._loaded
