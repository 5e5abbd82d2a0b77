"""Signing and verifying ROS messages with the command key (carryon_common.core.command_auth).

The HMAC covers a canonical encoding of the message's fields, not its CDR bytes: CDR
leaves alignment padding uninitialised, so the same message serialises to different bytes
in different processes. Every field is encoded in declaration order (the `signature`
field of the signed message left out): numbers as little-endian binary, strings as UTF-8
with their length, sequences with their length, nested messages recursively."""

from __future__ import annotations

import struct
from typing import Any

from carryon_common import convert
from carryon_common.core.command_auth import LatchState, sign

_DOUBLE = struct.Struct("<d")
_LONG = struct.Struct("<q")
_ULONG = struct.Struct("<Q")


def _encode(value: Any, out: list[bytes]) -> None:
    if hasattr(value, "get_fields_and_field_types"):
        for name in value.get_fields_and_field_types():
            _encode(getattr(value, name), out)
    elif isinstance(value, bool):
        out.append(b"\x01" if value else b"\x00")
    elif isinstance(value, int):
        out.append(_LONG.pack(value) if value < 2**63 else _ULONG.pack(value))
    elif isinstance(value, float):
        out.append(_DOUBLE.pack(value))
    elif isinstance(value, str):
        data = value.encode()
        out.append(_ULONG.pack(len(data)) + data)
    elif isinstance(value, (bytes, bytearray)):
        out.append(_ULONG.pack(len(value)) + bytes(value))
    else:  # list, tuple, array.array, numpy array
        items = list(value)
        out.append(_ULONG.pack(len(items)))
        for item in items:
            _encode(item.item() if hasattr(item, "item") else item, out)


def payload(msg: Any) -> bytes:
    """The bytes a signature covers: every field of `msg` but `signature`, canonically encoded."""
    out: list[bytes] = [type(msg).__name__.encode()]
    for name in msg.get_fields_and_field_types():
        if name != "signature":
            _encode(getattr(msg, name), out)
    return b"".join(out)


def sign_msg(key: bytes | None, msg: Any) -> Any:
    """Set `msg.signature` (nothing to do without a key); returns `msg`."""
    if key is not None:
        msg.signature = sign(key, payload(msg))
    return msg


def latch_state(msg: Any) -> LatchState:
    """An EstopState message as a LatchState."""
    return LatchState(bool(msg.active), str(msg.reason), str(msg.source), convert.time_from_msg(msg.header.stamp))
