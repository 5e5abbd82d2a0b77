"""What a message holds, checked before any of it is used (issue 43: nothing a message holds
can crash a node or steer the driver).

Two layers, both on plain values (no ROS import; messages are read by attribute):

* `check_fields` walks every field of a message by its rosidl introspection
  (`get_fields_and_field_types()`): text is bounded and decodable (invalid UTF-8 arrives as
  U+FFFD, which rclpy substitutes), names hold no control or format characters, numbers are
  finite and of sane magnitude, stamps are valid times, sequences are bounded. The node base
  class runs it on every message of a type in `MESSAGE_LIMITS` before its callback (an
  ActionChunk: convert.chunk_from_msg does, so the node answers that refusal itself).
* The semantic checks (`check_image`, `check_quaternion`, `check_joint_state`, ...) are what
  one message type must satisfy to mean anything; the convert functions call them.

Every refusal is an `InvalidMessage` whose text names the field and the reason, with the
offending value shown escaped and cut short (`shown`), so it can be logged and published.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from carryon_common.core.errors import InvalidMessage

MAX_NAME_CHARS = 256  # an id, a name, a frame, an encoding, a signature
MAX_TEXT_CHARS = 4096  # free text: an e-stop's reason, who engaged it
MAX_SEQUENCE = 10_000  # elements of a sequence (chunk steps, joints, labels)
MAX_BYTES = 64 * 2**20  # bytes of an image's data (a 4K 32FC1 depth image is 33 MB)
MAX_ABS = 1e9  # any number a message carries in SI units (metres, radians, seconds, pixels)
MAX_IMAGE_SIDE = 16_384  # pixels
QUATERNION_NORM_TOLERANCE = 0.05  # a unit quaternion's norm may differ from 1 by this (float32 senders)
_SHOWN_CHARS = 60

# The encodings message_fields.image_from_fields decodes -> (channels, bytes per channel).
IMAGE_CHANNELS = {"rgb8": (3, 1), "bgr8": (3, 1), "32FC1": (1, 4), "32SC1": (1, 4), "16UC1": (1, 2)}
IMAGE_CHANNELS |= {"8UC1": (1, 1), "16SC1": (1, 2)}

_FLOATS = frozenset({"double", "float", "float32", "float64"})
_INTEGERS = frozenset({"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"})
_BYTES = frozenset({"uint8", "octet", "byte", "char"})
_TIME = "builtin_interfaces/Time"


@dataclass(frozen=True)
class Limits:
    """How `check_fields` reads one message type. Field names (not paths) select fields."""

    free_text: frozenset[str] = frozenset()  # text kept whatever characters it holds (bounded)
    nonfinite_ok: frozenset[str] = frozenset()  # numbers that may be NaN or infinite
    ranges: tuple[tuple[str, float, float], ...] = ()  # (field, low, high) narrower than ±MAX_ABS
    max_sequence: int = MAX_SEQUENCE
    max_bytes: int = MAX_BYTES


# The types the robot drivers and the shield take, each checked field by field on arrival
# (CarryOnNode). An e-stop's reason and source are free text: an engage is followed
# whatever its reason says. A joint state's velocity and effort may be NaN (unknown).
MESSAGE_LIMITS: dict[str, Limits] = {
    "carryon_interfaces/ActionChunk": Limits(),
    "carryon_interfaces/EstopState": Limits(free_text=frozenset({"reason", "source"})),
    "carryon_interfaces/SegmentationLabels": Limits(),
    "carryon_interfaces/SetTask_Request": Limits(),
    "carryon_interfaces/SetEstop_Request": Limits(free_text=frozenset({"reason", "source"})),
    "carryon_interfaces/SimReset_Request": Limits(ranges=(("seed", 0, 2**63 - 1),)),  # numpy seeds are >= 0
    # A displacement moves a body in one physics step: more than a table's length is no test.
    "carryon_interfaces/SimPerturb_Request": Limits(ranges=(("x", -5.0, 5.0), ("y", -5.0, 5.0), ("z", -5.0, 5.0))),
    "carryon_interfaces/SimState_Request": Limits(),
    "sensor_msgs/Image": Limits(),
    "sensor_msgs/CameraInfo": Limits(),
    "sensor_msgs/JointState": Limits(nonfinite_ok=frozenset({"velocity", "effort"})),
    "geometry_msgs/PoseStamped": Limits(),
    "std_msgs/Float64": Limits(),
}


def type_key(msg_type: type) -> str:
    """'pkg/Type' of a generated message class (a service's request: 'pkg/Srv_Request')."""
    return f"{msg_type.__module__.split('.')[0]}/{msg_type.__name__}"


# Checked where they are converted instead (convert.chunk_from_msg), so the node answers the
# refusal itself: the shield with a REJECTED_INVALID event, a driver on driver/rejections.
ANSWERED_BY_NODE = frozenset({"carryon_interfaces/ActionChunk"})


def limits_for(msg_type: type) -> Limits | None:
    """How `check_fields` reads `msg_type`; None for a type it does not check."""
    return MESSAGE_LIMITS.get(type_key(msg_type))


def limits_on_arrival(msg_type: type) -> Limits | None:
    """How a node checks `msg_type` before its callback sees it (None: not there)."""
    key = type_key(msg_type)
    return None if key in ANSWERED_BY_NODE else MESSAGE_LIMITS.get(key)


def shown(value: Any, max_chars: int = _SHOWN_CHARS) -> str:
    """`value` for a reason: escaped to printable ASCII (no control characters, surrogates
    or bidirectional overrides reach a log or a topic) and cut to about `max_chars`."""
    if isinstance(value, str) and len(value) > max_chars:
        return f"{value[:max_chars]!a}... ({len(value)} characters)"
    return ascii(value)


def check_name(value: Any, field: str, max_chars: int = MAX_NAME_CHARS) -> str:
    """An id, a name, a frame or an encoding: printable characters only (no control, format
    or private-use ones, no U+FFFD from undecodable bytes), at most `max_chars`."""
    text = _text(value, field, max_chars)
    if "\ufffd" in text:
        raise InvalidMessage(f"{field}: holds bytes that are not UTF-8: {shown(text)}")
    if not text.isprintable():
        raise InvalidMessage(f"{field}: holds control or invisible characters: {shown(text)}")
    return text


def check_text(value: Any, field: str, max_chars: int = MAX_TEXT_CHARS) -> str:
    """Free text (a reason): any characters but surrogates, at most `max_chars`."""
    return _text(value, field, max_chars)


def _text(value: Any, field: str, max_chars: int) -> str:
    if not isinstance(value, str):
        raise InvalidMessage(f"{field}: expected text, got {type(value).__name__}")
    if len(value) > max_chars:
        raise InvalidMessage(f"{field}: {len(value)} characters, more than {max_chars}")
    if any("\ud800" <= c <= "\udfff" for c in value):  # no UTF-8 form: it could not be logged or sent on
        raise InvalidMessage(f"{field}: holds unpaired surrogates: {shown(value)}")
    return value


def check_number(value: Any, field: str, *, low: float = -MAX_ABS, high: float = MAX_ABS) -> float:
    """A finite number in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise InvalidMessage(f"{field}: expected a number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number):
        raise InvalidMessage(f"{field}: {number} (numbers must be finite)")
    if not low <= number <= high:
        raise InvalidMessage(f"{field}: {number:g} is outside [{low:g}, {high:g}]")
    return number


def check_numbers(values: Any, field: str, *, bound: float = MAX_ABS) -> np.ndarray:
    """Every element finite and within ±bound; the values as a float64 array."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidMessage(f"{field}: expected numbers") from None
    bad = ~np.isfinite(array) | (np.abs(array) > bound)
    if bad.any():
        index = int(np.flatnonzero(bad.reshape(-1))[0])
        raise InvalidMessage(f"{field}[{index}]: {array.reshape(-1)[index]:g} (finite, within ±{bound:g})")
    return array


def check_stamp(sec: Any, nanosec: Any, field: str) -> float:
    """builtin_interfaces/Time as seconds: sec >= 0, nanosec < 1e9."""
    if not isinstance(sec, int) or not isinstance(nanosec, int) or sec < 0 or not 0 <= nanosec < 1_000_000_000:
        raise InvalidMessage(f"{field}: not a valid time (sec {shown(sec)}, nanosec {shown(nanosec)})")
    return sec + nanosec * 1e-9


def check_length(values: Sequence[Any] | Any, field: str, limit: int = MAX_SEQUENCE) -> int:
    size = len(values)
    if size > limit:
        raise InvalidMessage(f"{field}: {size} elements, more than {limit}")
    return size


# -- the walk over every field ---------------------------------------------------------------


_FIELDS: dict[type, tuple[tuple[str, str], ...]] = {}  # a message class's (field, declared type)


def _fields(msg_type: type) -> tuple[tuple[str, str], ...]:
    found = _FIELDS.get(msg_type)
    if found is None:
        found = _FIELDS[msg_type] = tuple(msg_type.get_fields_and_field_types().items())  # type: ignore[attr-defined]
    return found


def check_fields(msg: Any, limits: Limits | None = None, path: str = "") -> None:
    """Every field of `msg` (and of the messages inside it), by its declared type; raises
    InvalidMessage naming the first field that is not sane (see the module's docstring)."""
    limits = Limits() if limits is None else limits
    for name, declared in _fields(type(msg)):
        where = f"{path}{name}"
        value = getattr(msg, name)
        if declared.startswith("sequence<") or declared.endswith("]"):
            _check_collection(value, declared, name, where, limits)
        elif declared == _TIME:
            check_stamp(value.sec, value.nanosec, where)
        elif "/" in declared:
            check_fields(value, limits, f"{where}.")
        else:
            _check_scalar(value, declared.split("<=")[0], name, where, limits)


def _check_scalar(value: Any, kind: str, name: str, where: str, limits: Limits) -> None:
    if kind in ("string", "wstring"):
        if name in limits.free_text:
            check_text(value, where)
        else:
            check_name(value, where)
    elif kind in _FLOATS:
        if name not in limits.nonfinite_ok:
            check_number(value, where, **_range(name, limits))
    elif kind in _INTEGERS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidMessage(f"{where}: expected an integer, got {type(value).__name__}")
        low, high = _range(name, limits, integer=True).values()
        if not low <= value <= high:
            raise InvalidMessage(f"{where}: {value} is outside [{low:g}, {high:g}]")


def _range(name: str, limits: Limits, *, integer: bool = False) -> dict[str, float]:
    for field, low, high in limits.ranges:
        if field == name:
            return {"low": low, "high": high}
    return {"low": -math.inf, "high": math.inf} if integer else {"low": -MAX_ABS, "high": MAX_ABS}


def _check_collection(value: Any, declared: str, name: str, where: str, limits: Limits) -> None:
    inner = declared[len("sequence<") : -1] if declared.startswith("sequence<") else declared.rsplit("[", 1)[0]
    element = inner.split(",")[0].strip().split("<=")[0]
    if element in _BYTES:
        check_length(value, where, limits.max_bytes)
        return
    check_length(value, where, limits.max_sequence)
    if element in _FLOATS:
        if name not in limits.nonfinite_ok and len(value):
            check_numbers(value, where)
    elif element == _TIME:
        for index, item in enumerate(value):
            check_stamp(item.sec, item.nanosec, f"{where}[{index}]")
    elif "/" in element:
        leaves = _float_leaves(type(value[0])) if len(value) else None
        if leaves is not None:  # every field a number: one vectorised check, not a walk per element
            _check_float_rows(value, leaves, where, limits)
            return
        for index, item in enumerate(value):
            check_fields(item, limits, f"{where}[{index}].")
    elif element in ("string", "wstring"):
        for index, item in enumerate(value):
            _check_scalar(item, element, name, f"{where}[{index}]", limits)


_LEAVES: dict[type, tuple[tuple[str, ...], ...] | None] = {}


def _float_leaves(msg_type: type) -> tuple[tuple[str, ...], ...] | None:
    """The attribute paths of every field of `msg_type` when all are floats (nested messages
    included, e.g. ActionStep: position.x ... gripper), else None."""
    if msg_type in _LEAVES:
        return _LEAVES[msg_type]
    leaves: list[tuple[str, ...]] | None = []
    for name, declared in _fields(msg_type):
        if declared in _FLOATS:
            leaves.append((name,))  # type: ignore[union-attr]
            continue
        nested = "/" in declared and "<" not in declared and "[" not in declared
        inner = _float_leaves(type(getattr(msg_type(), name))) if nested else None
        if inner is None:
            leaves = None
            break
        leaves += [(name, *path) for path in inner]  # type: ignore[operator]
    _LEAVES[msg_type] = found = None if not leaves else tuple(leaves)
    return found


def _check_float_rows(items: Sequence[Any], leaves: tuple[tuple[str, ...], ...], where: str, limits: Limits) -> None:
    """Every float leaf of every item, checked at once against its own range (as check_number)."""
    rows = []
    for item in items:
        row = []
        for path in leaves:
            value = item
            for attribute in path:
                value = getattr(value, attribute)
            row.append(value)
        rows.append(row)
    array = np.asarray(rows, dtype=np.float64)
    for column, path in enumerate(leaves):
        if path[-1] in limits.nonfinite_ok:
            continue
        bounds = _range(path[-1], limits)
        values = array[:, column]
        bad = ~np.isfinite(values) | (values < bounds["low"]) | (values > bounds["high"])
        if bad.any():
            index = int(np.flatnonzero(bad)[0])
            check_number(float(values[index]), f"{where}[{index}].{'.'.join(path)}", **bounds)


# -- what one message type must satisfy ------------------------------------------------------


def check_image(height: int, width: int, step: int, encoding: str, data_bytes: int, *, field: str = "image") -> int:
    """A sensor_msgs/Image's geometry: a known encoding, sides in [1, MAX_IMAGE_SIDE], a row
    `step` at least width x pixel size, and exactly height x step bytes of data (at most
    MAX_BYTES). Returns the bytes per pixel."""
    check_name(encoding, f"{field}.encoding")
    if encoding not in IMAGE_CHANNELS:
        raise InvalidMessage(f"{field}.encoding: {shown(encoding)} is not one of {', '.join(IMAGE_CHANNELS)}")
    channels, size = IMAGE_CHANNELS[encoding]
    for side, value in (("height", height), ("width", width)):
        if not 1 <= value <= MAX_IMAGE_SIDE:
            raise InvalidMessage(f"{field}.{side}: {value} pixels (1 to {MAX_IMAGE_SIDE})")
    if step < width * channels * size:
        raise InvalidMessage(f"{field}.step: {step} bytes per row, less than {width} pixels x {channels * size} bytes")
    if data_bytes != height * step or data_bytes > MAX_BYTES:
        raise InvalidMessage(f"{field}.data: {data_bytes} bytes, expected height x step = {height * step}")
    return channels * size


def check_quaternion(x: float, y: float, z: float, w: float, field: str) -> tuple[float, float, float, float]:
    """A unit quaternion (norm within QUATERNION_NORM_TOLERANCE of 1), returned normalised."""
    values = [
        check_number(v, f"{field}.{name}", low=-2.0, high=2.0) for v, name in zip((x, y, z, w), "xyzw", strict=True)
    ]
    norm = math.sqrt(sum(v * v for v in values))
    if abs(norm - 1.0) > QUATERNION_NORM_TOLERANCE:
        raise InvalidMessage(f"{field}: norm {norm:.4f}, not a rotation (a unit quaternion has norm 1)")
    qx, qy, qz, qw = (v / norm for v in values)
    return qx, qy, qz, qw


def check_intrinsics(k: Sequence[float], field: str = "camera_info.k") -> np.ndarray:
    """A pinhole matrix K (row-major, 9 values): finite, positive focal lengths, last row 0 0 1."""
    if len(k) != 9:
        raise InvalidMessage(f"{field}: {len(k)} values, expected 9")
    matrix = check_numbers(k, field).reshape(3, 3)
    if not (matrix[0, 0] > 0 and matrix[1, 1] > 0) or not np.allclose(matrix[2], (0.0, 0.0, 1.0)):
        raise InvalidMessage(f"{field}: not a pinhole matrix (fx {matrix[0, 0]:g}, fy {matrix[1, 1]:g})")
    return matrix


def check_labels(ids: Sequence[int], label_names: Sequence[str], field: str = "labels") -> dict[int, str]:
    """A segmentation label table: as many names as ids, each id once, names sane."""
    check_length(ids, f"{field}.ids")
    if len(ids) != len(label_names):
        raise InvalidMessage(f"{field}: {len(ids)} ids but {len(label_names)} names")
    pairs = enumerate(zip(ids, label_names, strict=True))
    table = {int(i): check_name(n, f"{field}.names[{index}]") for index, (i, n) in pairs}
    if len(table) != len(ids):
        raise InvalidMessage(f"{field}.ids: an id is listed twice")
    return table


def check_joint_state(joint_names: Sequence[str], positions: Sequence[float], field: str = "joint_state") -> None:
    """A joint state's names and positions: as many of each, each name once, positions finite."""
    check_length(joint_names, f"{field}.name")
    if len(positions) != len(joint_names):
        raise InvalidMessage(f"{field}: {len(joint_names)} names but {len(positions)} positions")
    for index, name in enumerate(joint_names):
        check_name(name, f"{field}.name[{index}]")
    if len(set(joint_names)) != len(joint_names):
        raise InvalidMessage(f"{field}.name: a joint is listed twice")
    if len(positions):
        check_numbers(positions, f"{field}.position")
