"""The workspace layout the house style and ARCHITECTURE.md promise, checked on every run."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
from catkin_pkg.package import parse_package

REPO = Path(__file__).resolve().parents[1]
PYTHON_PACKAGES = sorted(p.parent.name for p in REPO.glob("carryon_*/setup.py"))
# Modules a core/ module must never import: rclpy and generated ROS message packages.
ROS_MODULES = ("rclpy", "rosidl", "builtin_interfaces", "std_msgs", "geometry_msgs", "sensor_msgs",
               "visualization_msgs", "carryon_interfaces", "launch", "launch_ros", "ament_index_python")  # fmt: skip


def test_expected_packages_exist() -> None:
    expected = {"carryon_memory", "carryon_planner", "carryon_policy", "carryon_shield", "carryon_judge",
                "carryon_recovery", "carryon_sim", "carryon_bringup", "carryon_common", "carryon_robot",
                "carryon_bench"}  # fmt: skip
    assert expected <= set(PYTHON_PACKAGES)
    assert (REPO / "carryon_interfaces" / "CMakeLists.txt").is_file()


# Packages without a node of their own, so nothing to convert from ROS messages: a library
# (the robot model) and the benchmarks.
LIBRARY_PACKAGES = frozenset({"carryon_robot", "carryon_bench"})


@pytest.mark.parametrize("package", PYTHON_PACKAGES)
def test_python_package_shape(package: str) -> None:
    root = REPO / package
    node = () if package in LIBRARY_PACKAGES else (f"{package}/node.py", f"{package}/convert.py")
    for rel in ("package.xml", "setup.py", "setup.cfg", f"resource/{package}", f"{package}/__init__.py",
                f"{package}/core/__init__.py", *node, "test"):  # fmt: skip
        assert (root / rel).exists(), f"{package}: missing {rel}"


@pytest.mark.parametrize("package", [*PYTHON_PACKAGES, "carryon_interfaces"])
def test_package_xml_is_valid_and_declares_its_build_type(package: str) -> None:
    manifest = parse_package(str(REPO / package / "package.xml"))  # strict catkin_pkg validation
    manifest.validate()
    assert manifest.name == package
    expected = "ament_cmake" if package == "carryon_interfaces" else "ament_python"
    assert manifest.get_build_type() == expected


@pytest.mark.parametrize("package", [*PYTHON_PACKAGES, "carryon_interfaces"])
def test_colcon_built_it_as_a_ros_package(package: str) -> None:
    """colcon silently builds an ament_python package with an invalid manifest as plain
    Python; then it is missing from the ament index and `ros2 run` cannot find it."""
    marker = REPO / "install" / package / "share" / "ament_index" / "resource_index" / "packages" / package
    assert marker.exists(), f"{package} is not registered in the ament index; was it built as ament_python?"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


CORE_MODULES = sorted(REPO.glob("carryon_*/carryon_*/core/**/*.py"))


@pytest.mark.parametrize("path", CORE_MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_core_modules_never_import_ros(path: Path) -> None:
    bad = sorted(m for m in _imports(path) if m.split(".")[0] in ROS_MODULES)
    assert not bad, f"{path.relative_to(REPO)} imports {bad}; core/ must stay pure Python (house style 1)"


def test_the_purity_check_catches_rclpy(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import numpy\nfrom rclpy.node import Node\n")
    assert "rclpy.node" in _imports(sample)


def test_core_modules_import_without_ros() -> None:
    """Importing every core module must not pull rclpy in transitively either."""
    import subprocess
    import sys

    modules = sorted(
        ".".join(p.relative_to(p.parents[2]).with_suffix("").parts).removesuffix(".__init__") for p in CORE_MODULES
    )
    code = (
        "import sys, importlib\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "sys.exit(sorted(m for m in sys.modules if m.split('.')[0] == 'rclpy') and 'rclpy was imported' or 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_every_node_config_class_is_the_one_in_graph_yaml() -> None:
    from carryon_bringup.up import load_spec

    spec = load_spec(str(REPO / "config"))
    for launch in spec.launches("sim"):
        try:  # the node's module: <package>.<executable> (recorder_node), else <package>.node
            node_module = importlib.import_module(f"{launch.package}.{launch.executable}")
        except ImportError:
            node_module = importlib.import_module(f"{launch.package}.node")
        config_module, _, class_name = launch.config_class.partition(":")
        config_class = getattr(importlib.import_module(config_module), class_name)
        assert getattr(node_module, class_name) is config_class, f"{launch.name} does not use {launch.config_class}"


RUNTIME_MODULES = sorted(p for p in REPO.glob("carryon_*/carryon_*/**/*.py") if "test" not in p.relative_to(REPO).parts)
# House style 16: a module does one thing and its size follows what belongs together
# (LeRobot's modeling_act.py is 750 lines and reads fine). The cap catches a module that
# grew a second topic; at 400 it made modules split mid-topic just to fit (mend /
# mend_scene, grounding / text_grounding), so it sits where one topic still fits.
MAX_MODULE_LINES = 600


@pytest.mark.parametrize("path", RUNTIME_MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_runtime_modules_are_short_and_formatter_clean(path: Path) -> None:
    lines = path.read_text().splitlines()
    assert len(lines) <= MAX_MODULE_LINES, (
        f"{path.relative_to(REPO)} has {len(lines)} lines: split it by topic (house style 16)"
    )
    skipped = [i + 1 for i, line in enumerate(lines) if "fmt: skip" in line or "fmt: off" in line]
    assert not skipped, f"{path.relative_to(REPO)}: formatter turned off at lines {skipped} (only for aligned tables)"


def test_action_clients_are_the_construction_safe_ones() -> None:
    """rclpy's ActionClient can stop an executor that spins its node while it is made
    (ros2/rclpy#1589): everything in the workspace, tests too, uses carryon_common.actions'."""
    sources = [p for p in REPO.glob("carryon_*/**/*.py") if "build" not in p.parts and "install" not in p.parts]
    sources += list(REPO.glob("test/*.py")) + list(REPO.glob("scripts/*.py"))
    stock = re.compile(r"from rclpy\.action(\.client)? import[^\n]*\bActionClient\b|rclpy\.action\.ActionClient\(")
    found = [str(p.relative_to(REPO)) for p in sources if p.name != "actions.py" and stock.search(p.read_text())]
    assert not found, f"rclpy's own ActionClient in {found}: use carryon_common.actions.ActionClient"
