"""The QoS table: every graph topic has a kind, and no runtime module passes a QoS of its own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from rclpy.qos import DurabilityPolicy, ReliabilityPolicy

from carryon_common.core import names
from carryon_common.qos import TopicKind, kind_of, qos_for, qos_for_qualified, qos_of

REPO = Path(__file__).resolve().parents[2]
# Tools that are not nodes of the graph: the benchmarks' probes (their own package) and the
# simulator harness's stand-ins for other software (they name other software's topics on purpose).
NOT_RUNTIME_PACKAGES = ("carryon_bench",)
NOT_RUNTIME = ("harness",)
QOS_ARGUMENT = {"create_publisher": 2, "create_subscription": 3}


def runtime_modules() -> list[Path]:
    return sorted(
        path
        for package in REPO.glob("carryon_*/carryon_*")
        if package.name not in NOT_RUNTIME_PACKAGES
        for path in package.rglob("*.py")
        if not set(path.relative_to(package).parts) & set(NOT_RUNTIME)
    )


def endpoint_calls(path: Path) -> list[tuple[int, ast.expr | None, ast.expr | None]]:
    """(line, topic argument, QoS argument) of each create_publisher / create_subscription."""
    calls = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in QOS_ARGUMENT:
            index = QOS_ARGUMENT[node.func.attr]
            qos = node.args[index] if len(node.args) > index else None
            qos = next((k.value for k in node.keywords if k.arg == "qos_profile"), qos)
            calls.append((node.lineno, node.args[1] if len(node.args) > 1 else None, qos))
    return calls


def test_every_runtime_endpoint_takes_its_qos_from_the_table() -> None:
    modules = runtime_modules()
    assert len(modules) > 50  # the scan found the packages
    found, wrong = 0, []
    for path in modules:
        for line, topic, qos in endpoint_calls(path):
            found += 1
            where = f"{path.relative_to(REPO)}:{line}"
            table_call = isinstance(qos, ast.Call) and getattr(qos.func, "id", "") in ("qos_for", "qos_of")
            # A variable is fine when it holds the table's profile (sensor = qos_of(...));
            # a literal depth or rclpy's own profiles are not.
            own = isinstance(qos, ast.Constant) or (isinstance(qos, ast.Name) and qos.id.startswith("qos_profile"))
            if qos is None or own or not (table_call or isinstance(qos, ast.Name)):
                wrong.append(f"{where}: QoS {ast.unparse(qos) if qos else 'missing'}")
            if isinstance(topic, ast.Attribute) and isinstance(topic.value, ast.Name) and topic.value.id == "names":
                try:
                    kind_of(getattr(names, topic.attr))
                except ValueError as exc:
                    wrong.append(f"{where}: {exc}")
    assert found >= 70, found
    assert not wrong, "\n".join(wrong)


def test_kinds_keep_their_promises() -> None:
    sensor, latched = qos_of(TopicKind.SENSOR), qos_of(TopicKind.LATCHED)
    assert sensor.reliability == ReliabilityPolicy.BEST_EFFORT and sensor.durability == DurabilityPolicy.VOLATILE
    assert latched.reliability == ReliabilityPolicy.RELIABLE and latched.durability == DurabilityPolicy.TRANSIENT_LOCAL
    for kind in (TopicKind.STATE, TopicKind.COMMAND, TopicKind.EVENTS):
        assert qos_of(kind).reliability == ReliabilityPolicy.RELIABLE
    # What each topic is: images best effort; every motion command, e-stop and decision reliable.
    for camera in names.CAMERAS:
        for stream in ("color", "depth", "segmentation"):
            assert kind_of(names.camera_topic(camera, stream)) is TopicKind.SENSOR
            assert kind_of(names.sim_truth_camera_topic(camera, stream)) is TopicKind.SENSOR
        for stream in ("camera_info", "pose", "labels"):
            assert kind_of(names.camera_topic(camera, stream)) is TopicKind.STATE
    for topic in (names.POLICY_CHUNK, names.RECOVERY_CHUNK, names.SHIELD_CHUNK):
        assert kind_of(topic) is TopicKind.COMMAND
    assert kind_of(names.ESTOP_STATE) is kind_of(names.PLAN_STATE) is TopicKind.LATCHED
    assert kind_of(names.SHIELD_EVENTS) is kind_of(names.VERDICT) is TopicKind.EVENTS
    # A depth changes the queue, never the kind; each call gives a new profile.
    assert qos_for(names.PLAN_STATE, depth=10).depth == 10 and qos_for(names.PLAN_STATE).depth == 1
    assert qos_for(names.PLAN_STATE) is not qos_for(names.PLAN_STATE)


def test_unknown_topics_and_qualified_names() -> None:
    with pytest.raises(ValueError, match=r"'camera/wrist/infrared' is not in carryon_common\.qos's table"):
        qos_for("camera/wrist/infrared")
    with pytest.raises(ValueError, match="'tf' is not in"):
        qos_for("tf")
    assert qos_for_qualified("/carryon/camera/scene/depth", "carryon").reliability == ReliabilityPolicy.BEST_EFFORT
    assert qos_for_qualified("/lab/estop/state", "/lab/").durability == DurabilityPolicy.TRANSIENT_LOCAL
    assert qos_for_qualified("/clock", "clock").depth == 10  # ROS's own absolute name
    assert qos_for_qualified("/carryon/tf", "carryon", default=TopicKind.STATE).depth == 10
    with pytest.raises(ValueError):
        qos_for_qualified("/carryon/tf", "carryon")
