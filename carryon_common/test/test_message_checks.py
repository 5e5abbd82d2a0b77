"""message_checks and the convert functions the drivers and the shield use (issue 43):
property tests on messages drawn field by field from their rosidl introspection (any text,
any float including NaN and infinities, integers at their limits, sequences of any length)
say that a message is either accepted or refused with InvalidMessage naming its field,
never anything else; and the refusal's text is safe to log and publish."""

from __future__ import annotations

import importlib
import math
from typing import Any

import numpy as np
import pytest
from geometry_msgs.msg import PoseStamped
from hypothesis import given
from hypothesis import strategies as st
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64

from carryon_common import convert
from carryon_common.core import message_checks as checks
from carryon_common.core.errors import InvalidMessage
from carryon_common.core.refusals import Refusals, printable
from carryon_interfaces.msg import ActionChunk, EstopState, SegmentationLabels
from carryon_interfaces.srv import SetEstop, SetTask, SimPerturb, SimReset

INT_RANGES = {"int8": 7, "int16": 15, "int32": 31, "int64": 63, "uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}
# Text that is hard to get right: controls, surrogates cannot arrive (rclpy replaces invalid UTF-8).
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=300) | st.sampled_from(
    ["\ufffd", "a\u202eb", "x" * 5000]
)
FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=32)


def _class(type_name: str) -> Any:
    package, name = type_name.split("/")
    return getattr(importlib.import_module(f"{package}.msg"), name)


def _scalar(kind: str) -> st.SearchStrategy[Any]:
    kind = kind.split("<=", maxsplit=1)[0]
    if kind in ("string", "wstring"):
        return TEXT
    if kind in ("double", "float", "float32", "float64"):
        return FLOATS
    if kind == "boolean":
        return st.booleans()
    if kind in ("octet", "char", "byte"):
        return st.integers(0, 255)
    bits = INT_RANGES[kind]
    if kind.startswith("u"):
        return st.integers(0, 2**bits - 1)
    return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


def messages(msg_type: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Any message of `msg_type`: every field drawn by its declared type."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for name, declared in msg_type.get_fields_and_field_types().items():
        if declared.startswith("sequence<") or declared.endswith("]"):
            inner = declared[len("sequence<") : -1] if declared.startswith("sequence<") else declared.rsplit("[", 1)[0]
            element = inner.split(",", maxsplit=1)[0].strip()
            size = None if declared.startswith("sequence<") else int(declared.rsplit("[", 1)[1][:-1])
            item = messages(_class(element), depth + 1) if "/" in element else _scalar(element)
            if element in ("uint8", "octet"):
                fields[name] = st.binary(max_size=64)
            elif size is not None:
                fields[name] = st.lists(item, min_size=size, max_size=size)
            else:
                fields[name] = st.lists(item, max_size=3 if depth else 12)
        elif "/" in declared:
            fields[name] = messages(_class(declared), depth + 1)
        else:
            fields[name] = _scalar(declared)
    return st.builds(msg_type, **fields)


CONVERTERS = {
    ActionChunk: convert.chunk_from_msg,
    Image: convert.image_array,
    CameraInfo: convert.intrinsics,
    PoseStamped: convert.pose_matrix,
    SegmentationLabels: convert.labels_from_msg,
    JointState: lambda m: convert.joint_positions(m, ["a", "b"]),
    Float64: convert.gripper_width,
}
TYPES = [*CONVERTERS, EstopState, SetTask.Request, SetEstop.Request, SimReset.Request, SimPerturb.Request]


@pytest.mark.parametrize("msg_type", TYPES, ids=lambda t: t.__name__)
@given(data=st.data())
def test_any_message_is_accepted_or_refused_with_its_field_named(msg_type: Any, data: st.DataObject) -> None:
    msg = data.draw(messages(msg_type))
    try:
        checks.check_fields(msg, checks.limits_for(msg_type))
        if msg_type in CONVERTERS:
            CONVERTERS[msg_type](msg)
    except InvalidMessage as exc:
        reason = str(exc)
        assert ":" in reason  # "<field>: <why>"
        assert reason.isprintable()  # the message's own text only escaped: safe to log and publish


@given(TEXT)
def test_a_name_is_printable_and_bounded_or_refused(text: str) -> None:
    try:
        name = checks.check_name(text, "name")
    except InvalidMessage as exc:
        assert str(exc).startswith("name: ")
        assert str(exc).isprintable()  # the value is shown escaped
    else:
        assert name.isprintable() and len(name) <= checks.MAX_NAME_CHARS and "\ufffd" not in name


@given(st.text(max_size=2000), st.integers(1, 500))
def test_printable_escapes_everything_unprintable_and_bounds_the_length(text: str, limit: int) -> None:
    out = printable(text, limit)
    assert out.isprintable()
    assert len(out) <= 10 * limit + 3  # an escape is at most \U0010ffff
    out.encode("utf-8")  # no surrogates: it can be logged and published


@given(FLOATS)
def test_a_number_is_finite_and_bounded_or_refused(value: float) -> None:
    try:
        assert abs(checks.check_number(value, "x")) <= checks.MAX_ABS
    except InvalidMessage:
        assert not math.isfinite(value) or abs(value) > checks.MAX_ABS


def _image(**fields: Any) -> Image:
    values = {"height": 2, "width": 3, "encoding": "32FC1", "step": 12, "data": bytes(24), **fields}
    return Image(**values)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"encoding": "yuv422"}, "image.encoding: 'yuv422' is not one of"),
        ({"height": 0, "data": b""}, "image.height: 0 pixels"),
        ({"width": 2**31}, "image.width"),
        ({"step": 4}, "image.step: 4 bytes per row"),
        ({"data": bytes(23)}, "image.data: 23 bytes, expected height x step = 24"),
        ({"step": 2**31, "data": bytes(24)}, "image.data"),
    ],
)
def test_an_image_whose_geometry_does_not_add_up_is_refused(fields: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidMessage, match=reason.replace("(", r"\(")):
        convert.image_array(_image(**fields))


def test_the_semantic_checks_name_the_field_and_why() -> None:
    assert convert.image_array(_image()).shape == (2, 3)
    pose = PoseStamped()
    pose.pose.orientation.w = 0.0
    with pytest.raises(InvalidMessage, match=r"pose\.orientation: norm 0\.0000"):
        convert.pose_matrix(pose)  # (0, 0, 0, 0) is no rotation
    pose.pose.orientation.w, pose.pose.position.x = 1.0, float("nan")
    with pytest.raises(InvalidMessage, match=r"pose.position\[0\]: nan"):
        convert.pose_matrix(pose)
    with pytest.raises(InvalidMessage, match="not a pinhole matrix"):
        convert.intrinsics(CameraInfo())
    with pytest.raises(InvalidMessage, match="2 ids but 1 names"):
        convert.labels_from_msg(SegmentationLabels(ids=[1, 2], names=["a"]))
    with pytest.raises(InvalidMessage, match="an id is listed twice"):
        convert.labels_from_msg(SegmentationLabels(ids=[1, 1], names=["a", "b"]))
    with pytest.raises(InvalidMessage, match="2 names but 1 positions"):
        convert.joint_positions(JointState(name=["a", "b"], position=[0.0]), ["a"])
    with pytest.raises(InvalidMessage, match="a joint is listed twice"):
        convert.joint_positions(JointState(name=["a", "a"], position=[0.0, 1.0]), ["a"])
    assert convert.joint_positions(JointState(name=["a", "b"], position=[0.5, 1.0]), ["b"]).tolist() == [1.0]
    assert convert.joint_positions(JointState(name=["a"], position=[0.5]), ["c"]) is None
    with pytest.raises(InvalidMessage, match="gripper_width: 2 is outside"):
        convert.gripper_width(Float64(data=2.0))


def test_field_walk_limits() -> None:
    chunk = ActionChunk()
    chunk.header.stamp.nanosec = 1_000_000_000
    with pytest.raises(InvalidMessage, match=r"header\.stamp: not a valid time"):
        convert.chunk_from_msg(chunk)
    estop = EstopState(reason="stopped \u202e by\nhand")  # free text: an engage is followed whatever it says
    checks.check_fields(estop, checks.limits_for(EstopState))
    estop.source = "x" * (checks.MAX_TEXT_CHARS + 1)
    with pytest.raises(InvalidMessage, match="source: 4097 characters"):
        checks.check_fields(estop, checks.limits_for(EstopState))
    with pytest.raises(InvalidMessage, match="seed: -1 is outside"):
        checks.check_fields(SimReset.Request(seed=-1), checks.limits_for(SimReset.Request))
    perturb = SimPerturb.Request(kind=1, object="bowl")
    perturb.displacement.z = 50.0
    with pytest.raises(InvalidMessage, match=r"displacement\.z: 50 is outside"):
        checks.check_fields(perturb, checks.limits_for(SimPerturb.Request))
    velocity = JointState(name=["a"], position=[0.0], velocity=[float("nan")])
    checks.check_fields(velocity, checks.limits_for(JointState))  # an unknown velocity is no error
    assert checks.limits_on_arrival(ActionChunk) is None  # the node answers a bad chunk itself
    assert checks.limits_on_arrival(Image) is not None


def test_refusals_log_the_first_of_each_kind_then_a_count() -> None:
    refusals = Refusals(log_every_s=10.0)
    first = refusals.record("topic /a", "InvalidMessage", "x: NaN", 0.0, invalid=True)
    quiet = refusals.record("topic /a", "InvalidMessage", "x: NaN", 1.0, invalid=True)
    other = refusals.record("topic /a", "KeyError", "'k'", 2.0, invalid=False)
    later = refusals.record("topic /a", "InvalidMessage", "x: inf", 10.5, invalid=True)
    assert (first.first, quiet.first, quiet.suppressed, other.first) == (True, False, 0, True)
    assert (later.first, later.suppressed) == (False, 2)  # the quiet one and this one
    assert refusals.lines() == (
        "refused messages=3 (last: topic /a: x: inf)",
        "callback errors=1 (last: topic /a: 'k')",
    )
    assert Refusals().lines() == ()


def test_check_numbers_reports_the_first_bad_element() -> None:
    with pytest.raises(InvalidMessage, match=r"k\[4\]: inf"):
        checks.check_numbers(np.array([1.0, 2, 3, 4, np.inf]), "k")
