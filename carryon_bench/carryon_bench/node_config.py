"""A node's config for benchmarks that build its backend in-process: the same YAML the
graph gives the node (`<config dir>/nodes/<node>.yaml`), then `--set NODE.KEY=VALUE`."""

from __future__ import annotations

from typing import Any, TypeVar

from carryon_bench.core.bench import BenchOptions
from carryon_bringup.core.graph import find_config_dir
from carryon_bringup.up import default_config_fallbacks
from carryon_common.core.config import NodeConfig, load_node_config, parse_override
from carryon_common.core.errors import ConfigError

C = TypeVar("C", bound=NodeConfig)


def node_config(
    options: BenchOptions, config_cls: type[C], node_name: str, *, read_elsewhere: tuple[str, ...] = ()
) -> C:
    """`config_cls` for `node_name` from the benchmark's config folder and its `--set`
    overrides; an override for another node is refused (this benchmark would ignore it),
    except those of `read_elsewhere` (nodes whose overrides the benchmark reads itself, e.g.
    policy_node.lerobot_checkpoint_dir for the learned policy's)."""
    config_dir = find_config_dir(options.config_dir, default_config_fallbacks())
    overrides: dict[str, Any] = {}
    for text in options.sets:
        node, key, value = parse_override(text)
        if node in read_elsewhere:
            continue
        if node != node_name:
            raise ConfigError(f"--set {text!r}: this benchmark only uses {node_name}'s parameters")
        overrides[key] = value
    files = [config_dir / "nodes" / f"{node_name}.yaml"]
    return load_node_config(config_cls, [f for f in files if f.is_file()], node_name, "/", overrides)
