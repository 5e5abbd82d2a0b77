"""Malformed variants of any ROS message type, made generically from the rosidl field
introspection (`get_fields_and_field_types`): for the message fuzz graph test and its probe.

Each variant starts from a valid baseline and breaks one thing: a string non-ASCII, very
long, with a NUL or control characters; a number NaN, infinite, huge or at its type's
limits; a sequence empty, oversized or one longer than its siblings; a fixed array with a
NaN. `raw_variants` breaks the serialized form instead (invalid UTF-8 in a string, a
truncated or garbled payload), which no Python message object can hold.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Iterator
from typing import Any

from rclpy.serialization import serialize_message

# Sizes large enough to be refused by any sane bound, small enough for DDS on loopback.
LONG_STRING = 200_000  # characters
LONG_SEQUENCE = 100_001  # elements of a primitive sequence
LONG_MESSAGE_SEQUENCE = 5_001  # elements of a sequence of messages
LONG_BYTES = 4_000_000  # bytes of a uint8[] (an image's data)

STRINGS: dict[str, str] = {
    "non-ASCII": "ünïcødé ✓ 日本語 \u202etxt",
    "long": "x" * LONG_STRING,
    "NUL": "a\x00b",
    "control": "\x1b[31m\r\n\x07",
    "empty": "",
}
FLOATS: dict[str, float] = {"NaN": float("nan"), "inf": float("inf"), "-inf": float("-inf"), "huge": 1e300}
INT_LIMITS: dict[str, tuple[int, int]] = {
    "int8": (-(2**7), 2**7 - 1),
    "uint8": (0, 2**8 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint64": (0, 2**64 - 1),
}
FLOAT_TYPES = ("double", "float", "float32", "float64")
BYTE_TYPES = ("uint8", "octet", "byte", "char")
# Values some fields must hold to mean anything; tried on any field of that name.
NAMED: dict[str, dict[str, Any]] = {
    "encoding": {"unknown encoding": "yuv422_weird", "wider encoding": "64FC3"},
}

Variant = tuple[str, Any]  # (label, message)


def message_class(type_name: str) -> Any:
    """'pkg/Type' or 'pkg/msg/Type' -> the message class."""
    parts = type_name.split("/")
    module = importlib.import_module(f"{parts[0]}.msg")
    return getattr(module, parts[-1])


def _element_type(field_type: str) -> tuple[str, int | None]:
    """'sequence<T>' / 'sequence<T, N>' / 'T[N]' -> (T, None for a sequence, N for an array)."""
    if field_type.startswith("sequence<"):
        return field_type[len("sequence<") : -1].split(",", maxsplit=1)[0].strip(), None
    base, size = field_type[:-1].split("[")
    return base, int(size)


def _is_collection(field_type: str) -> bool:
    return field_type.startswith("sequence<") or field_type.endswith("]")


def _scalar_variants(field_type: str, name: str) -> dict[str, Any]:
    base = field_type.split("<=", maxsplit=1)[0]
    if base in ("string", "wstring"):
        return {**STRINGS, **NAMED.get(name, {})}
    if base in FLOAT_TYPES:
        return dict(FLOATS)
    if base in INT_LIMITS:
        low, high = INT_LIMITS[base]
        return {"min": low, "max": high}
    return {}


def _with(msg: Any, path: tuple[Any, ...], value: Any) -> Any | None:
    """A deep copy of `msg` with the field at `path` set to `value`; None when the message
    type itself refuses the value (rosidl checks ranges on assignment)."""
    out = copy.deepcopy(msg)
    target = out
    for key in path[:-1]:
        target = target[key] if isinstance(key, int) else getattr(target, key)
    try:
        if isinstance(path[-1], int):
            target[path[-1]] = value
        else:
            setattr(target, path[-1], value)
    except (AssertionError, TypeError, ValueError, OverflowError):
        return None
    return out


def _get(msg: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        msg = msg[key] if isinstance(key, int) else getattr(msg, key)
    return msg


def variants(baseline: Any, *, path: tuple[Any, ...] = (), root: Any = None) -> Iterator[Variant]:
    """Every malformed variant of `baseline` (a valid message), one broken field each."""
    root = baseline if root is None else root
    node = _get(root, path)
    for name, field_type in node.get_fields_and_field_types().items():
        where = (*path, name)
        label = ".".join(str(p) for p in where)
        value = getattr(node, name)
        if _is_collection(field_type):
            yield from _collection_variants(root, where, label, field_type, value)
        elif "/" in field_type:
            yield from variants(baseline, path=where, root=root)
        elif field_type == "boolean":  # the other meaning, with the rest of the baseline
            made = _with(root, where, not value)
            if made is not None:
                yield f"{label}: flipped", made
        else:
            for kind, bad in _scalar_variants(field_type, name).items():
                made = _with(root, where, bad)
                if made is not None:
                    yield f"{label}: {kind}", made


def _collection_variants(
    root: Any, where: tuple[Any, ...], label: str, field_type: str, value: Any
) -> Iterator[Variant]:
    element, size = _element_type(field_type)
    items = list(value)
    if "/" in element:  # a sequence of messages: empty, oversized, then each field of one element
        cls = message_class(element)
        first = items[0] if items else cls()
        for kind, seq in (("empty", []), ("oversized", [cls() for _ in range(LONG_MESSAGE_SEQUENCE)])):
            made = _with(root, where, seq)
            if made is not None and size is None:
                yield f"{label}: {kind}", made
        holder = _with(root, where, [first, *items[1:]])
        if holder is not None:
            yield from variants(holder, path=(*where, 0), root=holder)
        return
    if size is not None:  # a fixed array: one element broken
        for kind, bad in _scalar_variants(element, "").items():
            broken = list(items)
            broken[0] = bad
            made = _with(root, where, broken)
            if made is not None:
                yield f"{label}[0]: {kind}", made
        return
    default: Any = 0.0 if element in FLOAT_TYPES else ("" if element.startswith("string") else 0)
    if element in BYTE_TYPES:
        shapes = {"empty": b"", "one byte": b"\x01", "oversized": bytes(LONG_BYTES)}
    else:
        longer = [*items, items[-1] if items else default]
        shapes = {"empty": [], "one longer": longer, "oversized": [default] * LONG_SEQUENCE}
        for kind, bad in _scalar_variants(element, "").items():
            shapes[f"element {kind}"] = [bad, *items[1:]]
    for kind, seq in shapes.items():
        made = _with(root, where, seq)
        if made is not None:
            yield f"{label}: {kind}", made


MARK = "\x01MALFORMED\x01"
INVALID_UTF8 = b"\xff\xfe\xc3\x28\xa0\xa1\xe2\x28\xa1\xf0\x28"  # as long as MARK


def raw_variants(baseline: Any) -> Iterator[tuple[str, bytes]]:
    """Serialized variants no message object can hold: each string field (top level and in
    nested messages) as invalid UTF-8, then the whole payload truncated, garbled, empty."""
    assert len(INVALID_UTF8) == len(MARK.encode())
    for label, marked in _string_marked(baseline):
        data = serialize_message(marked)
        yield f"{label}: invalid UTF-8", data.replace(MARK.encode(), INVALID_UTF8, 1)
    data = serialize_message(baseline)
    yield "truncated", data[: max(1, len(data) // 2)]
    yield "garbled", bytes(data[:4]) + b"\xff" * (len(data) - 4)
    yield "empty payload", b""


def _string_marked(baseline: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[str, Any]]:
    node = _get(baseline, path)
    for name, field_type in node.get_fields_and_field_types().items():
        where = (*path, name)
        if field_type.split("<=")[0] in ("string", "wstring"):
            made = _with(baseline, where, MARK)
            if made is not None:
                yield ".".join(str(p) for p in where), made
        elif "/" in field_type and not _is_collection(field_type):
            yield from _string_marked(baseline, where)
