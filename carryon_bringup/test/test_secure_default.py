"""Secure by default on the robot profile (issue 43): without its keys it does not start.

* `carryon up --profile robot` on a PC where `carryon keys init` was never run exits with the
  configuration error (2) before starting any node, naming each missing key and the command
  that makes them; `carryon keys init` makes them, and the same start then gets past the keys;
* a node started by hand with `security: required` and no key exits 2 with the reason;
* `--insecure` starts without keys on purpose, and the nodes' status says INSECURE.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from carryon_bringup.core.run_keys import KEYS_DIR_ENV
from carryon_common.core.config import NodeConfig
from carryon_common.core.errors import ConfigError
from carryon_common.core.security import check_security

CLI = [sys.executable, "-m", "carryon_bringup.cli"]


def _carryon(config_dir: Path, keys_dir: Path, *args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, KEYS_DIR_ENV: str(keys_dir), "NO_COLOR": "1"}
    command = [*CLI, "--config-dir", str(config_dir), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)


def test_the_robot_profile_refuses_to_start_without_its_keys(config_dir: Path, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    up = ("up", "--profile", "robot", "--run-dir", str(tmp_path / "run"), "--ready-timeout", "1")
    done = _carryon(config_dir, keys, *up)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "arm_adapter_node.command_key_file" in done.stderr and "shield_node.operators_file" in done.stderr
    assert "carryon keys init" in done.stderr
    assert not (tmp_path / "run" / "logs").exists()  # no node was started

    made = _carryon(config_dir, keys, "keys", "init")
    assert made.returncode == 0, made.stdout + made.stderr
    assert (keys / "command.key").stat().st_mode & 0o777 == 0o600
    principals = (keys / "authorized_principals").read_text()
    assert "node:planner_node " in principals and " users=*" in principals
    again = _carryon(config_dir, keys, "keys", "init")  # kept, never replaced
    assert again.returncode == 0 and (keys / "authorized_principals").read_text() == principals


def test_a_node_with_security_required_and_no_key_refuses_to_start() -> None:
    from carryon_shield.core.config import ShieldConfig

    with pytest.raises(ConfigError, match=r"command_key_file .*operators_file .*carryon keys init"):
        check_security(ShieldConfig(security="required"), "shield_node")
    assert "not secured" in check_security(ShieldConfig(), "shield_node")
    assert check_security(ShieldConfig(security="insecure"), "shield_node").startswith("INSECURE")
    assert check_security(NodeConfig(security="required"), "judge") == "required, every key given"  # nothing to miss


def test_a_node_process_without_its_keys_exits_with_the_reason(tmp_path: Path) -> None:
    """shield_node as `ros2 run` would start it, with the robot profile's security and no key."""
    start = "import sys; from carryon_shield.node import main; sys.exit(main())"
    command = [sys.executable, "-c", start, "--ros-args", "-p", "security:=required"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "security is 'required'" in done.stderr and "carryon keys init" in done.stderr
