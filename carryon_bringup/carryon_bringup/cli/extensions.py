"""Commands other packages add to `carryon`, found through the `carryon.cli_commands` entry
point group: each entry names an `add_<cmd>(sub, common)` function like this package's own
command modules (carryon_bench registers `bench`).

carryon_bringup never imports those packages: a robot PC installs it without them. A command
this package knows about but whose package is not installed still parses, so `carryon bench
...` says what to install instead of argparse's "invalid choice".
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points

from carryon_bringup.cli.common import EXIT_USAGE, Subparsers, err

GROUP = "carryon.cli_commands"
AddCommand = Callable[[Subparsers, argparse.ArgumentParser], None]

# Commands of packages a robot PC may leave out: name -> (what it does, the package that adds it).
KNOWN = {"bench": ("run a benchmark (see --list)", "carryon_bench")}


def _entries() -> dict[str, EntryPoint]:
    return {entry.name: entry for entry in entry_points(group=GROUP)}


def extension(name: str) -> AddCommand:
    """The `add_<name>` of the package that registers `name`, or, when none is installed (or
    it fails to import), a stand-in command that says what to install and exits 2."""

    def add(sub: Subparsers, common: argparse.ArgumentParser) -> None:
        entry = _entries().get(name)
        if entry is not None:
            try:
                found: AddCommand = entry.load()
            except ImportError as exc:  # a broken install must not take `carryon estop` down with it
                _missing(sub, common, name, f"{entry.value} does not import ({exc})")
                return
            found(sub, common)
            return
        _missing(sub, common, name, "it is not installed")

    return add


def others(placed: set[str]) -> list[AddCommand]:
    """The registered commands not given a place in `carryon --help`'s order, by name."""
    return [extension(name) for name in sorted(_entries()) if name not in placed]


def _missing(sub: Subparsers, common: argparse.ArgumentParser, name: str, why: str) -> None:
    what, package = KNOWN.get(name, ("", name))
    parser = sub.add_parser(name, parents=[common], help=f"{what} [needs {package}]".strip())
    message = f"`carryon {name}` needs the {package} package, but {why}: install it (in the workspace, " + (
        f"`colcon build --packages-select {package}`); a robot PC runs without it"
    )

    def refuse(_args: argparse.Namespace) -> int:
        err.print(f"error: {message}")
        return EXIT_USAGE

    parser.set_defaults(handler=refuse, takes_any_arguments=True)
