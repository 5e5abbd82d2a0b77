"""The package dependency rules of docs/architecture.md, checked on every run.

1. core/ never imports a node module: a `carryon_*/core/` module imports only other core
   modules of the workspace (never `node.py`, `convert.py` or anything else that talks ROS).
2. No runtime package imports the simulator or its harness (`carryon_sim`): what a robot
   perceives it perceives from the cameras. The scripted stand-in VLA, which reads simulator
   truth by design, is no exception: the harness registers it through an entry point
   (`carryon.policy_backends`) and the policy's backend registry finds it there by name.
3. Planner core never imports the execution loop's packages (shield, policy, judge,
   recovery): the planner talks to them only through messages.
4. Every package's package.xml declares each workspace package its modules import (lazy
   imports and `importlib.import_module("...")` strings included).
5. Capabilities are peers: a capability package (planner, policy, perception, shield, judge,
   recovery, memory, arm) imports only `carryon_common`, `carryon_robot` (the robot model),
   `carryon_interfaces` and itself. What two capabilities share moves down to one of those;
   bringup, the simulation harness and the benchmarks may import capabilities.
6. Nothing imports the benchmarks: `carryon_bench` sits on top, beside bringup and the
   simulation harness, so a robot PC installs every other package without it (`carryon
   bench` is found by entry point, carryon_bringup/cli/extensions.py).
7. Three floors: every package stands on one of them, and no import points to a floor above
   its own. The ground holds what everything shares (`carryon_interfaces`, `carryon_common`,
   `carryon_robot`); the capabilities stand side by side on it (rule 5); bringup, the
   simulation harness and the benchmarks stand on top. A new package is placed on a floor
   before it can pass.

Each rule has a test that feeds it a deliberate violation, so a checker that stopped
looking would fail here.
"""

from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from catkin_pkg.package import parse_package

REPO = Path(__file__).resolve().parents[1]

# What runs on a robot: these never import the simulator or the harness.
RUNTIME_PACKAGES = frozenset(
    (
        *("carryon_common", "carryon_robot", "carryon_memory", "carryon_planner", "carryon_policy"),
        *("carryon_shield", "carryon_judge", "carryon_recovery", "carryon_arm", "carryon_perception"),
    )
)
SIMULATOR = "carryon_sim"
EXECUTION_LOOP = frozenset({"carryon_shield", "carryon_policy", "carryon_judge", "carryon_recovery"})
# The capabilities (rule 5): peers that share only what lies beneath them, in SHARED_LAYERS.
CAPABILITIES = frozenset(
    (
        *("carryon_planner", "carryon_policy", "carryon_perception", "carryon_shield"),
        *("carryon_judge", "carryon_recovery", "carryon_memory", "carryon_arm"),
    )
)
SHARED_LAYERS = frozenset({"carryon_common", "carryon_robot", "carryon_interfaces"})
BENCHMARKS = "carryon_bench"  # rule 6: on top, beside carryon_bringup and carryon_sim's harness
# (module file relative to the repo, imported module): the labelled exceptions, each with its reason.
# None now: the scripted stand-in VLA, once imported here by name, registers itself through an
# entry point (carryon_sim/setup.py, group carryon.policy_backends).
ALLOWED: dict[tuple[str, str], str] = {}

# Rule 7: the floors, lowest first.
FLOORS: tuple[frozenset[str], ...] = (
    SHARED_LAYERS,
    CAPABILITIES,
    frozenset({"carryon_bringup", SIMULATOR, BENCHMARKS}),
)


@dataclass(frozen=True)
class Edge:
    """`path` (relative to the workspace root) imports `module` (a workspace module)."""

    path: str
    module: str

    @property
    def source_package(self) -> str:
        return self.path.split("/", 1)[0]

    @property
    def target_package(self) -> str:
        return self.module.split(".", 1)[0]


def _imported(tree: ast.AST) -> set[str]:
    """Every module named by an import statement (anywhere, lazy ones included) or by a
    string passed to `import_module(...)`."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name == "import_module" and node.args and isinstance(node.args[0], ast.Constant):
                found.add(str(node.args[0].value))
    return found


def module_files(root: Path) -> list[Path]:
    """The Python modules of every ament_python package under `root` (not tests, not setup.py)."""
    return sorted(p for p in root.glob("carryon_*/carryon_*/**/*.py") if "test" not in p.relative_to(root).parts[:2])


def edges(root: Path) -> list[Edge]:
    """Every import of a workspace module (`carryon_*`) by a module of another package or its own."""
    out = []
    for path in module_files(root):
        rel = path.relative_to(root).as_posix()
        for module in _imported(ast.parse(path.read_text(), filename=rel)):
            if module.startswith("carryon_"):
                out.append(Edge(rel, module))
    return out


def _is_core(path: str) -> bool:
    parts = path.split("/")
    return len(parts) > 3 and parts[2] == "core"


def _module_exists(root: Path, module: str) -> bool:
    parts = module.split(".")
    base = root / parts[0] / Path(*parts)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def core_imports_non_core(root: Path) -> list[str]:
    """Rule 1. `from carryon_x.core.y import Name` is also seen as `carryon_x.core.y.Name`:
    only names that are modules of their own count."""
    bad = []
    for edge in edges(root):
        if not _is_core(edge.path) or edge.target_package == "carryon_interfaces" or _allowed(edge):
            continue  # carryon_interfaces is ROS: test_workspace_layout's purity test covers it
        parts = edge.module.split(".")
        if len(parts) == 1 or not _module_exists(root, edge.module):
            continue  # a package root (`carryon_common`) or a name imported from a module
        if parts[1] != "core":
            bad.append(f"{edge.path} imports {edge.module} (core/ imports only core modules)")
    return bad


def _allowed(edge: Edge) -> bool:
    """An allowed import, or a name imported from an allowed module."""
    return (edge.path, edge.module) in ALLOWED or (edge.path, edge.module.rsplit(".", 1)[0]) in ALLOWED


def runtime_imports_simulator(root: Path) -> list[str]:
    """Rule 2."""
    found = {
        f"{e.path} imports {e.target_package} (runtime code never uses the simulator or its harness)"
        for e in edges(root)
        if e.source_package in RUNTIME_PACKAGES and e.target_package == SIMULATOR and not _allowed(e)
    }
    return sorted(found)


def planner_core_imports_execution_loop(root: Path) -> list[str]:
    """Rule 3."""
    return [
        f"{e.path} imports {e.module} (planner core talks to the execution loop only through messages)"
        for e in edges(root)
        if e.source_package == "carryon_planner" and _is_core(e.path) and e.target_package in EXECUTION_LOOP
    ]


def undeclared_dependencies(root: Path) -> list[str]:
    """Rule 4."""
    declared: dict[str, set[str]] = {}
    bad = []
    for edge in edges(root):
        source, target = edge.source_package, edge.target_package
        if source == target or _allowed(edge):
            continue
        if source not in declared:
            manifest = parse_package(str(root / source / "package.xml"))
            deps = manifest.exec_depends + manifest.build_export_depends + manifest.build_depends
            declared[source] = {d.name for d in deps}
        if target not in declared[source]:
            bad.append(f"{edge.path} imports {target} but {source}/package.xml does not declare it")
    return sorted(set(bad))


def capabilities_import_a_peer(root: Path) -> list[str]:
    """Rule 5."""
    found = {
        f"{e.path} imports {e.target_package} (a capability imports only common, robot, interfaces and itself)"
        for e in edges(root)
        if e.source_package in CAPABILITIES and e.target_package not in SHARED_LAYERS | {e.source_package}
    }
    return sorted(found)


def imports_the_benchmarks(root: Path) -> list[str]:
    """Rule 6."""
    found = {
        f"{e.path} imports {BENCHMARKS} (nothing imports the benchmarks; a robot PC runs without them)"
        for e in edges(root)
        if e.target_package == BENCHMARKS and e.source_package != BENCHMARKS
    }
    return sorted(found)


def _floor(package: str) -> int | None:
    return next((i for i, floor in enumerate(FLOORS) if package in floor), None)


def imports_point_down(root: Path) -> list[str]:
    """Rule 7."""
    packages = {p.name for p in root.glob("carryon_*") if (p / "package.xml").is_file()}
    found = {f"{name} stands on no floor (place it in FLOORS)" for name in packages if _floor(name) is None}
    for e in edges(root):
        source, target = _floor(e.source_package), _floor(e.target_package)
        if source is not None and target is not None and target > source:
            found.add(f"{e.path} imports {e.target_package}, a floor above its own (imports point down)")
    return sorted(found)


RULES = {
    "core never imports a node module": core_imports_non_core,
    "no runtime package imports the simulator or the harness": runtime_imports_simulator,
    "planner core never imports shield / policy / judge / recovery": planner_core_imports_execution_loop,
    "package.xml declares every package a module imports": undeclared_dependencies,
    "a capability imports only common, robot, interfaces and itself": capabilities_import_a_peer,
    "nothing imports the benchmarks": imports_the_benchmarks,
    "three floors, and imports point down": imports_point_down,
}


@pytest.mark.parametrize("rule", RULES)
def test_workspace_keeps_the_rule(rule: str) -> None:
    broken = RULES[rule](REPO)
    assert not broken, f"{rule}:\n  " + "\n  ".join(broken)


def test_allowed_exceptions_are_still_needed() -> None:
    """An exception nobody uses any more is removed, so it cannot hide a new violation."""
    seen = {(e.path, e.module) for e in edges(REPO)}
    stale = [f"{path} -> {module}" for path, module in ALLOWED if (path, module) not in seen]
    assert not stale, f"unused exceptions: {stale}"


# -- each rule catches a deliberate violation -----------------------------------------------


def _package(root: Path, name: str, depends: tuple[str, ...], files: dict[str, str]) -> None:
    pkg = root / name
    (pkg / name / "core").mkdir(parents=True)
    (pkg / name / "__init__.py").write_text("")
    (pkg / name / "core" / "__init__.py").write_text("")
    deps = "".join(f"  <exec_depend>{d}</exec_depend>\n" for d in depends)
    (pkg / "package.xml").write_text(
        '<?xml version="1.0"?>\n<package format="3">\n'
        f"  <name>{name}</name>\n  <version>0.1.0</version>\n  <description>d</description>\n"
        '  <maintainer email="m@example.org">m</maintainer>\n  <license>Apache-2.0</license>\n'
        f"{deps}  <export><build_type>ament_python</build_type></export>\n</package>\n"
    )
    for rel, text in files.items():
        (pkg / name / rel).write_text(text)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A clean two-package workspace: the planner core uses common core only."""
    _package(tmp_path, "carryon_common", (), {"core/skills.py": "X = 1\n", "convert.py": "import rclpy\n"})
    _package(
        tmp_path, "carryon_planner", ("carryon_common",), {"core/plan.py": "from carryon_common.core.skills import X\n"}
    )
    _package(tmp_path, "carryon_judge", (), {"core/rules.py": "Y = 1\n"})
    _package(tmp_path, SIMULATOR, (), {"core/world.py": "Z = 1\n"})
    return tmp_path


def test_the_clean_sample_workspace_keeps_every_rule(workspace: Path) -> None:
    assert all(not check(workspace) for check in RULES.values())


def test_core_importing_a_ros_module_of_the_workspace_is_caught(workspace: Path) -> None:
    (workspace / "carryon_planner/carryon_planner/core/plan.py").write_text("from carryon_common.convert import f\n")
    assert core_imports_non_core(workspace) == [
        "carryon_planner/carryon_planner/core/plan.py imports carryon_common.convert (core/ imports only core modules)"
    ]


def test_a_lazy_simulator_import_in_runtime_code_is_caught(workspace: Path) -> None:
    (workspace / "carryon_judge/carryon_judge/core/rules.py").write_text(
        "def f():\n    from carryon_sim.core.world import Z\n    return Z\n"
    )
    assert runtime_imports_simulator(workspace) == [
        "carryon_judge/carryon_judge/core/rules.py imports carryon_sim "
        "(runtime code never uses the simulator or its harness)"
    ]


def test_a_simulator_module_loaded_by_name_is_caught(workspace: Path) -> None:
    (workspace / "carryon_judge/carryon_judge/core/rules.py").write_text(
        "import importlib\nM = importlib.import_module('carryon_sim.core.world')\n"
    )
    assert runtime_imports_simulator(workspace)


def test_planner_core_importing_judge_core_is_caught(workspace: Path) -> None:
    (workspace / "carryon_planner/carryon_planner/core/plan.py").write_text("from carryon_judge.core.rules import Y\n")
    assert planner_core_imports_execution_loop(workspace)
    assert undeclared_dependencies(workspace) == [
        "carryon_planner/carryon_planner/core/plan.py imports carryon_judge but "
        "carryon_planner/package.xml does not declare it"
    ]


def test_a_capability_importing_a_peer_is_caught(workspace: Path) -> None:
    (workspace / "carryon_judge/carryon_judge/core/rules.py").write_text(
        "def f():\n    from carryon_planner.core.plan import X\n    return X\n"
    )
    assert capabilities_import_a_peer(workspace) == [
        "carryon_judge/carryon_judge/core/rules.py imports carryon_planner "
        "(a capability imports only common, robot, interfaces and itself)"
    ]
    (workspace / "carryon_judge/carryon_judge/core/rules.py").write_text("from carryon_robot.core.hand import X\n")
    assert capabilities_import_a_peer(workspace) == []  # the robot model lies beneath every capability


def test_bringup_importing_the_benchmarks_is_caught(workspace: Path) -> None:
    _package(workspace, BENCHMARKS, ("carryon_common",), {"core/bench.py": "X = 1\n"})
    _package(workspace, "carryon_bringup", (BENCHMARKS,), {"core/cli.py": "from carryon_bench.core.bench import X\n"})
    assert imports_the_benchmarks(workspace) == [
        "carryon_bringup/carryon_bringup/core/cli.py imports carryon_bench "
        "(nothing imports the benchmarks; a robot PC runs without them)"
    ]
    assert undeclared_dependencies(workspace) == []  # declaring it does not make it allowed


def test_the_workspace_stands_on_three_floors() -> None:
    """Every package is placed, and the longest chain of package imports crosses at most the
    three floors (inside the ground, robot -> common -> interfaces is one floor)."""
    placed = {p.name for p in REPO.glob("carryon_*") if (p / "package.xml").is_file()}
    assert placed == set().union(*FLOORS)
    assert len(FLOORS) == 3


def test_a_package_on_no_floor_or_an_import_upward_is_caught(workspace: Path) -> None:
    _package(workspace, "carryon_extra", (), {"core/x.py": "X = 1\n"})
    assert imports_point_down(workspace) == ["carryon_extra stands on no floor (place it in FLOORS)"]
    shutil.rmtree(workspace / "carryon_extra")
    (workspace / "carryon_common/carryon_common/core/skills.py").write_text("from carryon_judge.core.rules import Y\n")
    assert imports_point_down(workspace) == [
        "carryon_common/carryon_common/core/skills.py imports carryon_judge, a floor above its own (imports point down)"
    ]
