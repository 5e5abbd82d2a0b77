from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import yaml

from carryon_bringup.core.graph import GraphSpec, find_config_dir
from carryon_bringup.up import plan_launches, split_overrides, validate
from carryon_common.core.errors import ConfigError, UnknownNameError
from carryon_common.core.status import NodeHealth, NodeState


@pytest.fixture
def config_copy(tmp_path: Path, config_dir: Path) -> Path:
    target = tmp_path / "config"
    shutil.copytree(config_dir, target)
    return target


def test_profiles_select_nodes_in_start_order(config_dir: Path) -> None:
    spec = GraphSpec.load(config_dir)
    sim = [launch.name for launch in spec.launches("sim")]
    robot = [launch.name for launch in spec.launches("robot")]
    assert sim[-1] == "sim_node" and len(sim) == 10 and "perception_node" in sim
    assert "sim_node" not in robot
    policy = next(launch for launch in spec.launches("robot") if launch.name == "policy_node")
    assert [p.name for p in policy.params_files] == ["policy_node.yaml", "security.yaml", "policy_node.yaml"]
    assert policy.params_files[-1].parent.name == "robot"  # profile overlay applied last
    assert policy.load_config().backend == "openpi_remote"


def test_every_profile_validates_with_the_shipped_files(config_dir: Path) -> None:
    spec = GraphSpec.load(config_dir)
    for profile in spec.profiles:
        validate(spec.launches(profile), {})


def test_the_model_server_starts_only_for_a_planner_that_uses_it(config_dir: Path) -> None:
    """llm_server_node (graph.yaml `when: planner_node.llm_backend=local`) starts with the
    local model, not with another backend, not without the planner, always when named."""
    spec = GraphSpec.load(config_dir)
    for profile in spec.profiles:
        started = [launch.name for launch in plan_launches(spec, profile, (), ())[0]]
        assert started[:3] == ["memory_node", "llm_server_node", "planner_node"], started  # the server first
        scripted = plan_launches(spec, profile, (), ["planner_node.llm_backend=scripted"])[0]
        assert "llm_server_node" not in {launch.name for launch in scripted}
    assert [launch.name for launch in plan_launches(spec, "sim", ["memory_node"], ())[0]] == ["memory_node"]
    alone = plan_launches(spec, "sim", ["llm_server_node"], ())
    assert [launch.name for launch in alone[0]] == ["llm_server_node"] and alone[2]["llm_server_node"].port == 8421
    assert spec.conditional("llm_server_node") and not spec.conditional("planner_node")


def test_with_the_model_server_every_other_node_runs_nicer(config_dir: Path) -> None:
    """graph.yaml's `others_nice` on llm_server_node: the rest of the graph yields to the model
    (relative niceness kept, capped at 19) only while the model server is started."""
    spec = GraphSpec.load(config_dir)
    base = {launch.name: launch.nice for launch in spec.launches("sim")}
    lead = spec.data.nodes["llm_server_node"].others_nice
    assert lead > 0
    local = {launch.name: launch.nice for launch in plan_launches(spec, "sim", (), ())[0]}
    assert local.pop("llm_server_node") == base["llm_server_node"] == 0
    assert local == {name: min(19, base[name] + lead) for name in local}
    assert local["judge_node"] - local["shield_node"] == base["judge_node"] - base["shield_node"] > 0
    scripted = plan_launches(spec, "sim", (), ["planner_node.llm_backend=scripted"])[0]
    assert {launch.name: launch.nice for launch in scripted} == {n: v for n, v in base.items() if n in local}


def test_a_condition_on_an_unknown_node_or_malformed_is_a_config_error(config_copy: Path) -> None:
    graph = config_copy / "graph.yaml"
    data = yaml.safe_load(graph.read_text())
    data["nodes"]["llm_server_node"]["when"] = "planer_node.llm_backend=local"
    graph.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"when: unknown node 'planer_node'.*did you mean 'planner_node'"):
        GraphSpec.load(config_copy)
    data["nodes"]["llm_server_node"]["when"] = "planner_node llm_backend local"
    graph.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"when: String should match pattern"):
        GraphSpec.load(config_copy)


def test_unknown_profile_and_node_list_the_valid_ones(config_dir: Path) -> None:
    spec = GraphSpec.load(config_dir)
    with pytest.raises(UnknownNameError, match=r"unknown profile 'simm'; valid: robot, sim \(did you mean 'sim'\?\)"):
        spec.launches("simm")
    with pytest.raises(UnknownNameError, match="unknown node in profile 'robot' 'sim_node'; valid: "):
        spec.launches("robot", ["sim_node"])
    assert [launch.name for launch in spec.launches("sim", ["sim_node", "memory_node"])] == ["memory_node", "sim_node"]


def test_malformed_graph_yaml_names_file_key_and_reason(config_copy: Path) -> None:
    graph = config_copy / "graph.yaml"
    data = yaml.safe_load(graph.read_text())
    data["profiles"]["sim"]["nodes"].append("teleport_node")
    graph.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=rf"{graph}: .*unknown node 'teleport_node'"):
        GraphSpec.load(config_copy)

    del data["namespace"]
    data["profiles"]["sim"]["nodes"].remove("teleport_node")
    graph.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=rf"{graph}: namespace: Field required"):
        GraphSpec.load(config_copy)

    graph.write_text("namespace: carryon\nnodes: {memory_node: [unclosed\n")
    with pytest.raises(ConfigError, match=rf"{graph}:\d+:\d+: invalid YAML"):
        GraphSpec.load(config_copy)


def test_missing_parameter_file_is_reported(config_copy: Path) -> None:
    (config_copy / "nodes" / "judge_node.yaml").unlink()
    with pytest.raises(
        ConfigError, match=r"nodes\.judge_node\.params: parameter file 'nodes/judge_node\.yaml' does not exist"
    ):
        GraphSpec.load(config_copy)


def test_bad_node_parameters_fail_validation_with_file_and_key(config_copy: Path) -> None:
    path = config_copy / "nodes" / "sim_node.yaml"
    path.write_text(path.read_text().replace("control_rate_hz: 20.0", "control_rate_hz: -20.0"))
    spec = GraphSpec.load(config_copy)
    with pytest.raises(ConfigError, match=rf"{path}: control_rate_hz: Input should be greater than 0"):
        validate(spec.launches("sim"), {})


def test_overrides_are_validated_and_attributed(config_dir: Path) -> None:
    spec = GraphSpec.load(config_dir)
    launches = spec.launches("sim")
    overrides = split_overrides(["policy_node.backend=sim_scripted_safe", "sim_node.seed=3"], launches)
    resolved = validate(launches, overrides)
    assert resolved["policy_node"].backend == "sim_scripted_safe"
    assert resolved["sim_node"].seed == 3
    with pytest.raises(ConfigError, match=r"--set: backend: Value error, unknown policy backend 'openpi'"):
        validate(launches, split_overrides(["policy_node.backend=openpi"], launches))
    with pytest.raises(ConfigError, match="node 'warp_node' is not started"):
        split_overrides(["warp_node.x=1"], launches)


def test_config_dir_resolution(tmp_path: Path, config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CARRYON_CONFIG_DIR", raising=False)
    assert find_config_dir(None, [tmp_path, config_dir]) == config_dir
    monkeypatch.setenv("CARRYON_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match=r"no graph\.yaml found"):
        find_config_dir(None, [config_dir])
    assert find_config_dir(config_dir) == config_dir


def test_the_rviz_config_shows_topics_the_graph_publishes() -> None:
    """Every topic the rviz2 config displays is one of the graph's (names.py), qualified
    with the default namespace, and the fixed frame is the graph's world frame."""
    import yaml

    from carryon_common.core import names

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "rviz" / "carryon.rviz").read_text())
    manager = config["Visualization Manager"]
    assert manager["Global Options"]["Fixed Frame"] == "world"
    known = {f"/{names.DEFAULT_NAMESPACE}/{value}" for key, value in vars(names).items()
             if key.isupper() and isinstance(value, str) and value.islower() and not value.startswith("~")}  # fmt: skip
    known |= {f"/{names.DEFAULT_NAMESPACE}/{names.camera_topic(c, 'color')}" for c in names.CAMERAS}
    topics = [d["Topic"]["Value"] for d in manager["Displays"] if "Topic" in d]
    assert len(topics) == 4 and set(topics) <= known, set(topics) - known


def test_the_running_profile_is_the_one_whose_nodes_are_up(config_dir: Path) -> None:
    spec = GraphSpec.load(config_dir)
    shared = ["memory_node", "planner_node", "policy_node", "shield_node", "judge_node"]
    assert spec.running_profile([*shared, "arm_adapter_node"]) == "robot"
    assert spec.running_profile([*shared, "sim_node", "recorder_node"]) == "sim"
    assert spec.running_profile(["shield_node"]) is None  # both profiles have it: no telling
    assert spec.running_profile([]) is None and spec.running_profile(["other_node"]) is None


class _Graph:
    """What `carryon status` asks of the graph: the nodes discovery shows, their answers."""

    def __init__(self, seen: set[str], profiles: dict[str, str], *, unseen_for_s: float = 0.0) -> None:
        """`unseen_for_s`: discovery shows no node for this long (a busy machine)."""
        self.seen, self.profiles, self.asked = seen, profiles, list[str]()
        self.shown_at = time.monotonic() + unseen_for_s

    def running_nodes(self, groups: object, wait_s: float) -> set[str]:
        if not self.seen or time.monotonic() < self.shown_at:  # discovery waits its whole time for nobody
            time.sleep(max(0.0, min(wait_s, 0.05)))
            return set() if time.monotonic() < self.shown_at else self.seen
        return self.seen

    def statuses(self, node_names: list[str]) -> dict[str, NodeHealth | None]:
        self.asked += node_names
        reported = {n: self.profiles.get(n, "") for n in node_names}
        return {n: NodeHealth(n, 1, NodeState.READY, "", 1.0, "0", profile=p) for n, p in reported.items()}


def test_status_takes_the_profile_the_running_nodes_report(config_dir: Path) -> None:
    from carryon_bringup.cli.graph import _running_profile

    spec = GraphSpec.load(config_dir)
    # Discovery has not shown arm_adapter_node yet (a busy machine): the nodes' word decides.
    reported = {"shield_node": "robot", "perception_node": "robot"}
    graph = _Graph({"shield_node", "perception_node", "other_node"}, reported)
    profile, answered, waited = _running_profile(spec, graph, 5.0)
    assert profile == "robot" and set(answered) == {"shield_node", "perception_node"}  # CarryOn's nodes only
    assert waited == 0.0  # nodes were seen: the status requests get the whole timeout
    # No node seen: discovery is waited for until the timeout, which it then has spent (status
    # without a graph fails within --timeout) ...
    started = time.monotonic()
    assert _running_profile(spec, _Graph(set(), {}), 0.3)[2] >= 0.3 and time.monotonic() - started < 1.0
    # ... so a graph that discovery shows late (3 s, a CI run's busy machine) is still found by its word.
    late = _Graph({"shield_node", "perception_node"}, reported, unseen_for_s=3.0)
    assert _running_profile(spec, late, 10.0)[0] == "robot"
    # Nodes started outside the launchers report no profile: the nodes seen decide.
    assert _running_profile(spec, _Graph({"shield_node", "arm_adapter_node"}, {}), 5.0)[0] == "robot"
    assert _running_profile(spec, _Graph({"shield_node"}, {}), 5.0)[0] is None
    # Two profiles in one namespace, or one graph.yaml does not know: no telling from their word.
    mixed = _Graph({"shield_node", "sim_node"}, {"shield_node": "robot", "sim_node": "sim"})
    assert _running_profile(spec, mixed, 5.0)[0] == "sim"
    assert _running_profile(spec, _Graph({"shield_node"}, {"shield_node": "lab"}), 5.0)[0] is None
