"""`ros2 launch carryon_bringup carryon.launch.py` and `carryon up` start the same graph.

`launch` / `launch_ros` are not on PyPI, so the launch file is executed against small
stand-ins that record what it asks for; the records are compared with the command
lines `carryon up` runs.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import yaml

from carryon_bringup.core.graph import GraphSpec
from carryon_bringup.core.run_keys import KEYS_DIR_ENV, make_keys, signers
from carryon_bringup.up import command_for, plan_launches
from carryon_common.core.names import REALTIME_PRIORITY_ENV

LAUNCH_FILE = Path(__file__).resolve().parents[1] / "launch" / "carryon.launch.py"


class _Recorder:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


class _LaunchConfiguration:
    def __init__(self, name: str) -> None:
        self.name = name

    def perform(self, context: dict[str, str]) -> str:
        return context[self.name]


def _fake_launch_modules() -> dict[str, types.ModuleType]:
    launch = types.ModuleType("launch")
    launch.LaunchDescription = list  # type: ignore[attr-defined]
    actions = types.ModuleType("launch.actions")
    actions.DeclareLaunchArgument = _Recorder  # type: ignore[attr-defined]
    actions.OpaqueFunction = _Recorder  # type: ignore[attr-defined]
    actions.Shutdown = _Recorder  # type: ignore[attr-defined]
    substitutions = types.ModuleType("launch.substitutions")
    substitutions.LaunchConfiguration = _LaunchConfiguration  # type: ignore[attr-defined]
    launch_ros = types.ModuleType("launch_ros")
    launch_ros_actions = types.ModuleType("launch_ros.actions")
    launch_ros_actions.Node = _Recorder  # type: ignore[attr-defined]
    return {
        "launch": launch,
        "launch.actions": actions,
        "launch.substitutions": substitutions,
        "launch_ros": launch_ros,
        "launch_ros.actions": launch_ros_actions,
    }


def _launched_nodes(monkeypatch: pytest.MonkeyPatch, arguments: dict[str, str]) -> list[dict[str, Any]]:
    for name, module in _fake_launch_modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    spec = importlib.util.spec_from_file_location("carryon_launch_under_test", LAUNCH_FILE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    entities = module.generate_launch_description()
    declared = {e.args[0]: e.kwargs["default_value"] for e in entities if "default_value" in e.kwargs}
    opaque = next(e for e in entities if "function" in e.kwargs)
    return [node.kwargs for node in opaque.kwargs["function"]({**declared, **arguments})]


def _as_command(node: dict[str, Any]) -> tuple[str, str, str, str, list[str], str]:
    """What launch_ros runs for a Node: [prefix] lib/<package>/<executable> --ros-args -r __node -r __ns
    --params-file ..."""
    prefix = node["prefix"] or ""
    return node["package"], node["executable"], node["name"], f"/{node['namespace']}", node["parameters"], prefix


def _parse_up_command(cmd: list[str]) -> tuple[str, str, str, str, list[str], str]:
    start = next(i for i, part in enumerate(cmd) if part.startswith("/"))  # after `nice -n N`, `env X=N`
    prefix, cmd = " ".join(cmd[:start]), cmd[start:]
    exe = Path(cmd[0])
    args = cmd[cmd.index("--ros-args") + 1 :]
    remaps = dict(args[i + 1].split(":=") for i, a in enumerate(args) if a == "-r")
    params = [args[i + 1] for i, a in enumerate(args) if a == "--params-file"]
    return exe.parent.name, exe.name, remaps["__node"], remaps["__ns"], params, prefix


@pytest.mark.parametrize("profile", ["sim", "robot"])
def test_launch_file_and_carryon_up_start_the_same_processes(
    monkeypatch: pytest.MonkeyPatch, config_dir: Path, profile: str, tmp_path: Path
) -> None:
    monkeypatch.delenv("CARRYON_PROFILE", raising=False)
    # The robot profile's keys are installed on the PC (`carryon keys init`), not made per launch.
    monkeypatch.setenv(KEYS_DIR_ENV, str(tmp_path / "installed"))
    spec = GraphSpec.load(config_dir)
    if profile == "robot":
        make_keys(tmp_path / "installed", signers(spec.config_classes("robot")))
    launched = _launched_nodes(monkeypatch, {"profile": profile, "config_dir": str(config_dir)})
    started = plan_launches(spec, profile, (), ())[0]  # as `carryon up` selects them (and nices them)
    up = [_parse_up_command(command_for(launch)) for launch in started]
    # Both give the shield and the robot driver the command key, the nodes that check operators
    # the authorized principals, the signing nodes a key of their own (planner_node's and
    # perception_node's may sign requests) and the recorder their public keys (`carryon up` as
    # --set overrides, the launch file as one more params file): the rest is the same.
    keyed = {
        node["name"]: yaml.safe_load(Path(node["parameters"].pop()).read_text())["/**"]["ros__parameters"]
        for node in launched
        if node["parameters"][-1].endswith("_keys.yaml")
    }
    driver = "sim_node" if profile == "sim" else "arm_adapter_node"
    checkers = {"shield_node", "memory_node", "planner_node", "policy_node", "recovery_node"}
    checkers |= {"sim_node"} if profile == "sim" else set()
    assert set(keyed) == {driver, "judge_node", "recorder_node", "perception_node"} | checkers
    key_file = Path(keyed[driver]["command_key_file"])
    assert key_file == Path(keyed["shield_node"]["command_key_file"])
    assert key_file.stat().st_mode & 0o777 == 0o600 and len(bytes.fromhex(key_file.read_text())) == 32
    assert (key_file.parent == tmp_path / "installed") == (profile == "robot")
    operators = {keyed[name]["operators_file"] for name in checkers}
    authorized = Path(operators.pop()).read_text()
    assert len(operators) == 0 and "node:shield_node" not in authorized
    assert "node:planner_node " in authorized and "node:perception_node " in authorized
    signers_ = ("planner_node", "shield_node", "judge_node", "memory_node", "perception_node")
    publishers = Path(keyed["recorder_node"]["publishers_file"]).read_text()
    for name in signers_:
        assert Path(keyed[name]["identity_file"]).stat().st_mode & 0o777 == 0o600
        assert f"node:{name} " in publishers
    assert [_as_command(node) for node in launched] == up
    assert len(up) == len(spec.launches(profile))
    niced = {launch.name: launch.nice for launch in spec.launches(profile) if launch.nice}
    # The judge waits behind the control path; perception, which the shield needs fresh, does not.
    assert niced.get("judge_node", 0) > 0 and not {"shield_node", "perception_node"} & set(niced)
    # The shield's decisions run ahead of the rest (SCHED_FIFO, applied by the node itself), in both launchers.
    shield = next(node for node in launched if node["name"] == "shield_node")
    priority = spec.data.nodes["shield_node"].realtime_priority
    assert shield["prefix"].endswith(f"env {REALTIME_PRIORITY_ENV}={priority}")  # after `nice`: others_nice
    assert spec.data.nodes["shield_node"].realtime_priority > 0
    for node, launch in zip(launched, started, strict=True):
        assert node["respawn"] == (launch.restart.max_restarts > 0)
        # Like `carryon up`, a node that exits for good shuts the whole launch down.
        assert (node["on_exit"] is not None) == (launch.restart.max_restarts == 0)


def test_launch_file_honours_only_and_validates_parameters(
    monkeypatch: pytest.MonkeyPatch, config_dir: Path, tmp_path: Path
) -> None:
    launched = _launched_nodes(monkeypatch, {"profile": "sim", "config_dir": str(config_dir), "only": "shield_node"})
    assert [node["name"] for node in launched] == ["shield_node"]

    import shutil

    from carryon_common.core.errors import ConfigError

    broken = tmp_path / "config"
    shutil.copytree(config_dir, broken)
    params = broken / "nodes" / "shield_node.yaml"
    params.write_text(params.read_text().replace("grounder: masks", "grounder: mask"))
    with pytest.raises(ConfigError, match="did you mean 'masks'"):
        _launched_nodes(monkeypatch, {"profile": "sim", "config_dir": str(broken)})


def test_both_default_to_the_same_profile(monkeypatch: pytest.MonkeyPatch, config_dir: Path) -> None:
    spec = GraphSpec.load(config_dir)
    monkeypatch.delenv("CARRYON_PROFILE", raising=False)
    launched = _launched_nodes(monkeypatch, {"config_dir": str(config_dir)})
    assert [n["name"] for n in launched] == [launch.name for launch in spec.launches(spec.resolve_profile(None))]
    monkeypatch.setenv("CARRYON_PROFILE", "robot")
    launched = _launched_nodes(monkeypatch, {"config_dir": str(config_dir), "insecure": "true"})
    assert "sim_node" not in [n["name"] for n in launched]
    assert spec.resolve_profile(None) == "robot"


def test_the_robot_profile_does_not_start_without_its_installed_keys(
    monkeypatch: pytest.MonkeyPatch, config_dir: Path, tmp_path: Path
) -> None:
    """Secure by default (issue 43): no command key or authorized principals on the robot PC
    stops the launch before any node starts, naming each file and `carryon keys init`;
    insecure:=true starts it without keys on purpose, every node saying so."""
    from carryon_common.core.errors import ConfigError

    monkeypatch.setenv(KEYS_DIR_ENV, str(tmp_path / "nothing here"))
    with pytest.raises(ConfigError, match=r"(?s)arm_adapter_node.command_key_file.*carryon keys init"):
        _launched_nodes(monkeypatch, {"profile": "robot", "config_dir": str(config_dir)})
    launched = _launched_nodes(monkeypatch, {"profile": "robot", "config_dir": str(config_dir), "insecure": "true"})
    for node in launched:
        params = yaml.safe_load(Path(node["parameters"][-1]).read_text())["/**"]["ros__parameters"]
        assert params == {"security": "insecure"}, node["name"]
