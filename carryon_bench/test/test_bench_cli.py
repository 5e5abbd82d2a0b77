"""`carryon bench` comes from this package through the `carryon.cli_commands` entry point:
the installed package registers it, and the CLI runs it like its own commands."""

from __future__ import annotations

from importlib.metadata import entry_points

from carryon_bench.cli import add_bench
from carryon_bringup.cli import common
from carryon_bringup.cli.extensions import GROUP
from carryon_bringup.cli.main import main


def test_the_installed_package_registers_bench_for_the_cli() -> None:
    (entry,) = [e for e in entry_points(group=GROUP) if e.name == "bench"]
    assert entry.load() is add_bench


def test_carryon_bench_lists_and_checks_its_options_through_the_cli() -> None:
    assert main(["bench", "--list"]) == common.EXIT_OK
    assert main(["bench"]) == common.EXIT_USAGE  # the list, and no benchmark named
    assert main(["bench", "graph", "--episodes", "3"]) == common.EXIT_USAGE  # graph has no episode count
    assert main(["bench", "safety", "--suites", "x"]) == common.EXIT_USAGE  # only personalization has suites
