from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pytest
from pydantic import Field

from carryon_common.core.config import (
    NodeConfig,
    config_as_params,
    load_node_config,
    one_of,
    param_fields,
    parse_override,
    read_params_file,
)
from carryon_common.core.errors import ConfigError


class DemoConfig(NodeConfig):
    rate_hz: float = Field(20.0, gt=0.0, description="Control rate, Hz.")
    name: str = Field("arm", description="A name.")
    backend: Annotated[str, one_of("backend", ("fast", "slow"))] = Field("fast", description="Backend by name.")
    labels: tuple[str, ...] = Field((), description="Labels.")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_param_fields_lists_every_field_with_type_and_description() -> None:
    fields = {f.name: f for f in param_fields(DemoConfig)}
    assert fields["rate_hz"].type_name == "float"
    assert fields["labels"].type_name == "list[str]"
    assert fields["labels"].default == []
    assert fields["name"].description == "A name."


def test_param_fields_rejects_undescribed_and_unsupported_fields() -> None:
    class NoDescription(NodeConfig):
        x: int = 1

    class Nested(NodeConfig):
        x: dict[str, int] = Field(default_factory=dict, description="not a ROS parameter")

    with pytest.raises(TypeError, match="description"):
        param_fields(NoDescription)
    with pytest.raises(TypeError, match="not a ROS parameter type"):
        param_fields(Nested)


def test_later_files_and_overrides_win(tmp_path: Path) -> None:
    base = write(tmp_path, "base.yaml", "/**:\n  ros__parameters:\n    rate_hz: 10\n    name: base\n")
    overlay = write(tmp_path, "overlay.yaml", "demo_node:\n  ros__parameters:\n    name: overlay\n")
    other = write(tmp_path, "other.yaml", "other_node:\n  ros__parameters:\n    name: not-me\n")
    config = load_node_config(DemoConfig, [base, overlay, other], "demo_node", "carryon", {"labels": ["a", "b"]})
    assert config.rate_hz == 10.0  # int in YAML accepted for a float field
    assert config.name == "overlay"
    assert config.labels == ("a", "b")


def test_invalid_value_names_file_key_and_reason(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.yaml", "/**:\n  ros__parameters:\n    rate_hz: -3\n")
    with pytest.raises(ConfigError) as info:
        load_node_config(DemoConfig, [path], "demo_node", "carryon")
    message = str(info.value)
    assert message.startswith(f"{path}: rate_hz: ")
    assert "greater than 0" in message


def test_unknown_key_and_unknown_backend_are_reported_with_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.yaml", "/**:\n  ros__parameters:\n    rate_hx: 3\n    backend: fsat\n")
    with pytest.raises(ConfigError) as info:
        load_node_config(DemoConfig, [path], "demo_node", "carryon")
    message = str(info.value)
    assert f"{path}: rate_hx: unknown parameter" in message
    assert "unknown backend 'fsat'" in message
    assert "did you mean 'fast'" in message


def test_malformed_yaml_reports_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "broken.yaml", "/**:\n  ros__parameters:\n    rate_hz: [1, 2\n    name: x\n")
    with pytest.raises(ConfigError, match=rf"{path}:\d+:\d+: invalid YAML"):
        read_params_file(path, "demo_node", "carryon")


def test_params_file_without_ros_parameters_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, "flat.yaml", "rate_hz: 3\n")
    with pytest.raises(ConfigError, match="ros__parameters"):
        read_params_file(path, "demo_node", "carryon")


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        read_params_file(tmp_path / "absent.yaml", "demo_node", "carryon")


def test_override_parsing() -> None:
    assert parse_override("sim_node.control_rate_hz=25") == ("sim_node", "control_rate_hz", 25)
    assert parse_override("planner_node.llm_model=qwen") == ("planner_node", "llm_model", "qwen")
    with pytest.raises(ConfigError, match=r"NODE\.KEY=VALUE"):
        parse_override("control_rate_hz=25")


def test_config_round_trips_through_params_document(tmp_path: Path) -> None:
    config = DemoConfig(rate_hz=5.0, labels=("x",))
    import yaml

    path = write(tmp_path, "resolved.yaml", yaml.safe_dump(config_as_params(config)))
    assert load_node_config(DemoConfig, [path], "demo_node", "carryon") == config


def test_ros_builtin_parameters_are_allowed_in_params_files(tmp_path: Path) -> None:
    path = write(tmp_path, "sim_time.yaml", "/**:\n  ros__parameters:\n    use_sim_time: true\n    rate_hz: 5.0\n")
    assert load_node_config(DemoConfig, [path], "demo_node", "carryon").rate_hz == 5.0
