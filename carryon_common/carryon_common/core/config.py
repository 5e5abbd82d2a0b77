"""Node configuration: one frozen pydantic model per node, loaded from ROS 2
parameter files under `config/`.

The same YAML is read three ways and must mean the same thing everywhere:
* by a node, through ROS parameters (`--params-file`; one parameter per field),
* by `carryon up` and the launch file, which validate it before starting anything,
* by benchmarks and tests, which build the config object directly.

Parameter files use the standard ROS 2 layout::

    /**:                       # or the node name, e.g. sim_node or /carryon/sim_node
      ros__parameters:
        control_rate_hz: 20.0
"""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from carryon_common.core.errors import ConfigError
from carryon_common.core.registry import unknown_name_message

C = TypeVar("C", bound="NodeConfig")
M = TypeVar("M", bound=BaseModel)

# Parameters every ROS node has; params files may set them, config classes never declare them.
ROS_BUILTIN_PARAMETERS = frozenset({"use_sim_time"})

# Scalar types a field may have; lists/tuples of one of them are allowed too.
_SCALARS: tuple[type, ...] = (bool, int, float, str)


def one_of(kind: str, valid: Iterable[str]) -> AfterValidator:
    """Validator for a name field: the value must be one of `valid`; the error lists them
    and suggests the closest. Use as `Annotated[str, one_of("policy backend", NAMES)]`."""
    names = tuple(valid)

    def check(value: str) -> str:
        if value not in names:
            raise ValueError(unknown_name_message(kind, value, names))
        return value

    return AfterValidator(check)


# What a node does without the keys its config names (command key, operators file, identity,
# publishers file): core/security.py.
SECURITY_MODES = ("required", "optional", "insecure")


class NodeConfig(BaseModel):
    """Base class of every node's configuration.

    Subclasses declare fields with a default and a `description` that states what the
    field does and its unit; each field becomes one ROS parameter of the same name.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    security: Annotated[str, one_of("security mode", SECURITY_MODES)] = Field(
        "optional",
        description=(
            "What the node does without the keys its other parameters name (command_key_file, operators_file, "
            "identity_file, publishers_file): 'required' = refuse to start (the robot profile: make them with "
            "`carryon keys init`); 'optional' = run and say it is not secured (a node started alone; `carryon up` "
            "gives every node keys in simulation); 'insecure' = run without them on purpose, said in its status "
            "and its log (docs/security.md)."
        ),
    )


@dataclass(frozen=True)
class ParamField:
    """One configuration field seen as a ROS parameter."""

    name: str
    default: Any
    description: str
    type_name: str  # e.g. "float", "list[str]"


def _type_name(annotation: Any, owner: str, name: str) -> str:
    if annotation in _SCALARS:
        return str(annotation.__name__)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (list, tuple) and args and args[0] in _SCALARS:
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            raise TypeError(f"{owner}.{name}: fixed-length tuples are not ROS parameters; use tuple[X, ...]")
        return f"list[{args[0].__name__}]"
    if isinstance(annotation, types.UnionType) or origin is typing.Union:
        raise TypeError(f"{owner}.{name}: optional/union fields are not ROS parameters; use a sentinel default")
    raise TypeError(
        f"{owner}.{name}: type {annotation!r} is not a ROS parameter type (bool, int, float, str or lists of them)"
    )


def param_fields(config_cls: type[NodeConfig]) -> list[ParamField]:
    """The ROS parameters a config class declares, in field order.

    Raises TypeError for a field that cannot be a ROS parameter or lacks a description.
    """
    fields = []
    for name, info in config_cls.model_fields.items():
        if not info.description:
            raise TypeError(f"{config_cls.__name__}.{name}: every config field needs a description with its unit")
        default = info.get_default(call_default_factory=True)
        if isinstance(default, tuple):
            default = list(default)
        fields.append(
            ParamField(name, default, info.description, _type_name(info.annotation, config_cls.__name__, name))
        )
    return fields


def format_validation_error(error: ValidationError, sources: Mapping[str, str], context: str) -> str:
    """Turn a pydantic error into `file: key: reason` lines.

    `sources` maps a key to where its value came from (a file path); keys not in it
    are attributed to `context`.
    """
    lines = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"]) or "(root)"
        top = str(item["loc"][0]) if item["loc"] else ""
        where = sources.get(top, context)
        reason = item["msg"]
        if item["type"] == "extra_forbidden":
            reason = "unknown parameter (not a field of this node's config)"
        lines.append(f"{where}: {key}: {reason}")
    return "\n".join(lines)


def build_config(config_cls: type[C], values: Mapping[str, Any], sources: Mapping[str, str], context: str) -> C:
    """Validate `values` into `config_cls`, raising ConfigError with file/key/reason."""
    try:
        return config_cls.model_validate(dict(values))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, sources, context)) from None


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def _selectors(node_name: str, namespace: str) -> tuple[str, ...]:
    ns = namespace.strip("/")
    full = f"/{ns}/{node_name}" if ns else f"/{node_name}"
    return ("/**", node_name, full, f"/**/{node_name}", full.lstrip("/"))


CONFIG_DIR_ENV = "CARRYON_CONFIG_DIR"


def config_path(configured: str, *default: str) -> Path:
    """`configured` when given, else `<$CARRYON_CONFIG_DIR or ./config>/<default...>` (where
    `carryon up` points every node)."""
    if configured:
        return Path(configured)
    return Path(os.environ.get(CONFIG_DIR_ENV, "config"), *default)


def under_config_dir(configured: str, *default: str) -> Path:
    """A file named by a config value: absolute as given, relative under the config folder
    (`$CARRYON_CONFIG_DIR`, else ./config), '' = `<config folder>/<default...>`."""
    path = Path(configured).expanduser() if configured else Path(*default)
    return path if path.is_absolute() else Path(os.environ.get(CONFIG_DIR_ENV, "config")) / path


def read_yaml(path: Path) -> Any:
    """Parse a YAML file; syntax errors become ConfigError with `file:line:column`."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None


def load_yaml_model(model_cls: type[M], path: Path) -> M:
    """A YAML file validated into `model_cls`; ConfigError names the file, the key and the reason."""
    data = read_yaml(path)
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, {}, str(path))) from None


def read_params_file(path: Path, node_name: str, namespace: str) -> dict[str, Any]:
    """The parameters a ROS 2 params file sets for one node (nested keys flattened with dots)."""
    data = read_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping of node names to 'ros__parameters', got {type(data).__name__}")
    params: dict[str, Any] = {}
    selectors = _selectors(node_name, namespace)
    for selector, body in data.items():
        if not isinstance(body, Mapping) or "ros__parameters" not in body:
            raise ConfigError(f"{path}: {selector}: expected a 'ros__parameters' mapping under the node name")
        if str(selector) not in selectors:
            continue
        section = body["ros__parameters"]
        if section is None:
            continue
        if not isinstance(section, Mapping):
            raise ConfigError(f"{path}: {selector}.ros__parameters: expected a mapping, got {type(section).__name__}")
        params.update(_flatten(section))
    empty = sorted(k for k, v in params.items() if isinstance(v, list) and not v)
    if empty:
        raise ConfigError(
            f"{path}: {', '.join(empty)}: an empty list in a ROS params file is dropped by ROS's parser, so the "
            "value of an earlier file stays in force; leave the key out to take the default"
        )
    return {k: v for k, v in params.items() if k not in ROS_BUILTIN_PARAMETERS}


def load_node_config(
    config_cls: type[C],
    files: Sequence[Path],
    node_name: str,
    namespace: str,
    overrides: Mapping[str, Any] | None = None,
) -> C:
    """Load a node's config from params files (later files win) plus `overrides`.

    Errors name the file that set the offending key (or `--set` for overrides).
    """
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for path in files:
        for key, value in read_params_file(path, node_name, namespace).items():
            values[key] = value
            sources[key] = str(path)
    for key, value in (overrides or {}).items():
        values[key] = value
        sources[key] = "--set"
    context = str(files[-1]) if files else node_name
    return build_config(config_cls, values, sources, context)


def parse_override(text: str) -> tuple[str, str, Any]:
    """Parse `node.key=value` (value parsed as YAML) into (node, key, value)."""
    lhs, sep, rhs = text.partition("=")
    node, dot, key = lhs.partition(".")
    if not sep or not dot or not node or not key:
        raise ConfigError(f"--set {text!r}: expected NODE.KEY=VALUE, e.g. sim_node.control_rate_hz=20.0")
    try:
        value = yaml.safe_load(rhs) if rhs else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {text!r}: value is not valid YAML: {exc}") from None
    return node.strip(), key.strip(), value


def config_as_params(config: NodeConfig, node_selector: str = "/**") -> dict[str, Any]:
    """A config as a ROS 2 params-file document (for resolved-config records)."""
    values = {name: (list(v) if isinstance(v, tuple) else v) for name, v in config.model_dump().items()}
    return {node_selector: {"ros__parameters": values}}
