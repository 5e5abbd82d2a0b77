"""The keys of a graph (docs/security.md): who may move the arm, who may ask, who decided.

One layout, in one folder:

    command.key              the command key the shield and the robot driver share (HMAC)
    authorized_principals    who may ask: this login's operator (users=*), the nodes that sign
                             requests (planner_node, perception_node) and the lines of
                             <config home>/authorized_operators (other operators)
    publishers               the nodes whose published decisions the audit accepts
    nodes/<node>.key         each signing node's own Ed25519 key

Where the folder is depends on the profile's `keys` in graph.yaml:

* `per_run` (the simulator): `carryon up` and the launch file make a new set in the run
  folder (`<run folder>/keys/`), for every node of the profile that signs, started or not (a
  test or bench tool may act as planner_node with its key from there).
* `installed` (a robot PC): the set `carryon keys init` made in the keys folder
  (`$CARRYON_KEYS_DIR`, else `<config home>`, i.e. ~/.config/carryon), kept across runs so a
  restarted node shares them. Nothing is made at start-up: a missing key stops the launch
  before any node starts, naming the file and `carryon keys init`.

Either way each node whose config names no file of its own gets the folder's file;
`--insecure` gives none and sets every node's `security` to `insecure` instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from carryon_common.core.command_auth import create_key_file
from carryon_common.core.config import NodeConfig
from carryon_common.core.errors import ConfigError
from carryon_common.core.operator_auth import (
    EVERY_USER,
    Identity,
    authorized_operators_path,
    config_home,
    create_identity,
    default_operator,
    load_identity,
    operator_key_path,
    parse_authorized,
)

COMMAND_KEY = "command.key"
OPERATORS_FILE = "authorized_principals"
PUBLISHERS_FILE = "publishers"
NODES_DIR = "nodes"
KEYS_DIR_ENV = "CARRYON_KEYS_DIR"
KEY_MODES = ("per_run", "installed")


def installed_keys_dir() -> Path:
    """Where `carryon keys init` keeps a robot PC's keys: $CARRYON_KEYS_DIR, else the config home."""
    configured = os.environ.get(KEYS_DIR_ENV)
    return Path(configured).expanduser() if configured else config_home()


def node_key_path(folder: Path, node: str) -> Path:
    return folder / NODES_DIR / f"{node}.key"


def node_identity(folder: Path, node: str) -> Identity:
    """A node's identity from a key folder (a test or bench tool acting as that node)."""
    return load_identity(node_key_path(folder, node), f"node:{node}")


def signers(config_classes: Mapping[str, type[NodeConfig]]) -> dict[str, bool]:
    """node -> whether it signs requests too, for every node whose config has an `identity_file`."""
    return {
        name: bool(getattr(cls, "signs_requests", False))
        for name, cls in config_classes.items()
        if "identity_file" in cls.model_fields
    }


def make_keys(folder: Path, signing_nodes: Mapping[str, bool]) -> list[Path]:
    """Make the key set in `folder` (files that exist are kept): the command key, a key per
    signing node, and the principals and publishers files written from them. Returns the
    files written or kept."""
    made = [create_key_file(folder / COMMAND_KEY)]
    own = operator_key_path()
    try:
        create_identity(own)
        operator = load_identity(own, f"operator:{default_operator()}")
        lines, publishers = [operator.public_line(EVERY_USER)], []
        for name, signs_requests in sorted(signing_nodes.items()):
            path = create_identity(node_key_path(folder, name))
            made.append(path)
            line = load_identity(path, f"node:{name}").public_line()
            publishers.append(line)
            if signs_requests:
                lines.append(line)
    except OSError as exc:
        raise ConfigError(
            f"cannot make the operator key {own}: {exc.strerror or exc} (set CARRYON_OPERATOR_KEY or XDG_CONFIG_HOME "
            "to a writable place)"
        ) from None
    extra = authorized_operators_path()
    if extra.exists():
        text = extra.read_text(encoding="utf-8")
        parse_authorized(text, str(extra))  # a broken line stops the run here, with its line number
        lines.append(text.strip())
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    operators, published = folder / OPERATORS_FILE, folder / PUBLISHERS_FILE
    header = "# Who may ask (carryon_bringup/core/run_keys.py, docs/security.md)\n"
    operators.write_text(header + "\n".join(lines) + "\n")
    published.write_text(
        "# Nodes whose published decisions the audit accepts (carryon_bringup/core/run_keys.py)\n"
        + "".join(f"{line}\n" for line in publishers)
    )
    return [*made, operators, published]


def _files(folder: Path, node: str) -> dict[str, Path]:
    """The key fields a node may have, and the file of `folder` each gets."""
    return {
        "command_key_file": folder / COMMAND_KEY,
        "operators_file": folder / OPERATORS_FILE,
        "publishers_file": folder / PUBLISHERS_FILE,
        "identity_file": node_key_path(folder, node),
    }


def give_keys(
    resolved: Mapping[str, Any], overrides: dict[str, dict[str, Any]], folder: Path, *, must_exist: bool = False
) -> bool:
    """Name `folder`'s files in `overrides` for every key field a node leaves empty. With
    `must_exist` (installed keys) a missing file is a ConfigError naming it and the fix, for
    all nodes at once. False when no node needs a key."""
    missing: list[str] = []
    given = False
    for name, cfg in resolved.items():
        for field, path in _files(folder, name).items():
            if getattr(cfg, field, None) != "":
                continue
            given = True
            if must_exist and not path.exists():
                missing.append(f"{name}.{field}: {path}")
            overrides.setdefault(name, {})[field] = str(path.resolve())
    if missing:
        raise ConfigError(
            "no keys for this profile (its keys are installed on the PC, not made per run):\n  "
            + "\n  ".join(missing)
            + f"\nmake them with `carryon keys init` (in {folder}; docs/security.md), or start with --insecure to run "
            "without authentication on purpose"
        )
    return given


def insecure_overrides(names: Iterable[str], overrides: dict[str, dict[str, Any]]) -> None:
    """`--insecure`: every node runs without keys on purpose, and says so."""
    for name in names:
        overrides.setdefault(name, {})["security"] = "insecure"


def prepare_keys(
    mode: str,
    resolved: Mapping[str, Any],
    overrides: dict[str, dict[str, Any]],
    run_keys_dir: Path,
    profile_classes: Mapping[str, type[NodeConfig]],
    *,
    insecure: bool = False,
) -> Path | None:
    """The keys for a start of the graph (both launchers): `mode` is the profile's `keys`;
    `profile_classes` the config class of every node of the profile (its signers get keys even when not started).
    Returns the folder the keys come from (None with `insecure`)."""
    if insecure:
        insecure_overrides(resolved, overrides)
        return None
    if mode == "installed":
        folder = installed_keys_dir()
        give_keys(resolved, overrides, folder, must_exist=True)
        return folder
    if any(getattr(cfg, field, None) == "" for cfg in resolved.values() for field in _files(run_keys_dir, "")):
        make_keys(run_keys_dir, signers(profile_classes))
        give_keys(resolved, overrides, run_keys_dir)
    return run_keys_dir
