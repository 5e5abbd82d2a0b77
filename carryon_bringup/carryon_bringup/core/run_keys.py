"""The operator side of a run's keys (docs/security.md): who may release the e-stop, start
an Assist and write memory.

`carryon up` and the launch file give every node that serves such requests and has no
`operators_file` of its own the run's authorized principals file, and every node that
signs (requests or the decisions it publishes) and has no `identity_file` a key of its
own. The operators file lists this login's operator (its key made on first use, `carryon
keys operator`), the nodes that sign requests (planner_node), and the lines of `<config
home>/authorized_operators` (other operators' public keys). The publishers file lists
every signing node, for the recorder's audit (a node's key there lets it sign only
decisions, never requests).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from carryon_common.core.errors import ConfigError
from carryon_common.core.operator_auth import (
    authorized_operators_path,
    create_identity,
    default_operator,
    load_identity,
    operator_key_path,
    parse_authorized,
)

OPERATORS_FILE = "operators"
PUBLISHERS_FILE = "publishers"


def give_operator_keys(resolved: Mapping[str, Any], overrides: dict[str, dict[str, Any]], keys_dir: Path) -> bool:
    """Make the run's authorized principals file in `keys_dir` and name it (and each signing
    node's key) in `overrides`. False when no node needs one."""
    checkers = [name for name, cfg in resolved.items() if getattr(cfg, "operators_file", None) == ""]
    signers = [name for name, cfg in resolved.items() if getattr(cfg, "identity_file", None) == ""]
    auditors = [name for name, cfg in resolved.items() if getattr(cfg, "publishers_file", None) == ""]
    if not checkers and not signers and not auditors:
        return False
    own = operator_key_path()
    try:
        create_identity(own)
        lines = [load_identity(own, f"operator:{default_operator()}").public_line()]
        publishers = []
        for name in signers:
            path = create_identity(keys_dir / "nodes" / f"{name}.key").resolve()
            line = load_identity(path, f"node:{name}").public_line()
            publishers.append(line)
            if getattr(resolved[name], "signs_requests", False):
                lines.append(line)
            overrides.setdefault(name, {})["identity_file"] = str(path)
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
    operators = keys_dir / OPERATORS_FILE
    operators.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    operators.write_text(
        "# Authorized principals of this run (carryon_bringup/core/run_keys.py)\n" + "\n".join(lines) + "\n"
    )
    for name in checkers:
        overrides.setdefault(name, {})["operators_file"] = str(operators.resolve())
    published = keys_dir / PUBLISHERS_FILE
    published.write_text(
        "# Nodes whose published decisions the audit accepts (carryon_bringup/core/run_keys.py)\n"
        + "".join(f"{line}\n" for line in publishers)
    )
    for name in auditors:
        overrides.setdefault(name, {})["publishers_file"] = str(published.resolve())
    return True
