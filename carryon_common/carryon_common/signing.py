"""Signing and verifying ROS messages with the command key (carryon_common.core.command_auth).

The HMAC covers a canonical encoding of the message's fields, not its CDR bytes: CDR
leaves alignment padding uninitialised, so the same message serialises to different bytes
in different processes. Every field is encoded in declaration order (the `signature`
field of the signed message left out): numbers as little-endian binary, strings as UTF-8
with their length, sequences with their length, nested messages recursively."""

from __future__ import annotations

import itertools
import secrets
import struct
from typing import Any

import numpy as np

from carryon_common import convert
from carryon_common.core.command_auth import LatchState, Signed, sign

_DOUBLE = struct.Struct("<d")
_FLOAT = struct.Struct("<f")
_LONG = struct.Struct("<q")
_ULONG = struct.Struct("<Q")


def _is_float32(field_type: str) -> bool:
    """`float`, `float[3]`, `sequence<float>`, `sequence<float, 8>` (ROS IDL names)."""
    base = field_type.removeprefix("sequence<").split(",")[0].split("[")[0].rstrip(">")
    return base == "float"


def _encode(value: Any, out: list[bytes], float32: bool = False) -> None:
    if isinstance(value, np.generic):  # an element of a numpy-backed sequence field
        value = value.item()
    if hasattr(value, "get_fields_and_field_types"):
        for name, field_type in value.get_fields_and_field_types().items():
            _encode(getattr(value, name), out, _is_float32(field_type))
    elif isinstance(value, bool):
        out.append(b"\x01" if value else b"\x00")
    elif isinstance(value, int):
        out.append(_LONG.pack(value) if value < 2**63 else _ULONG.pack(value))
    elif isinstance(value, float):
        # A float32 field holds the sender's double until it is serialised; the receiver gets
        # it rounded to float32: both sides sign the rounded value.
        out.append(_FLOAT.pack(value) if float32 else _DOUBLE.pack(value))
    elif isinstance(value, str):
        data = value.encode()
        out.append(_ULONG.pack(len(data)) + data)
    elif isinstance(value, (bytes, bytearray)):
        out.append(_ULONG.pack(len(value)) + bytes(value))
    else:  # list, tuple, array.array, numpy array
        items = list(value)
        out.append(_ULONG.pack(len(items)))
        for item in items:
            _encode(item, out, float32)  # not item.item(): a message may have a field named `item`


def payload(msg: Any, topic: str) -> bytes:
    """The bytes a signature covers: the topic it is published on (a heartbeat is not an
    e-stop state) and every field of `msg` but `signature`, canonically encoded."""
    out: list[bytes] = [topic.encode(), b"\x00", type(msg).__name__.encode()]
    for name, field_type in msg.get_fields_and_field_types().items():
        if name != "signature":
            _encode(getattr(msg, name), out, _is_float32(field_type))
    return b"".join(out)


def sign_msg(key: bytes | None, msg: Any, topic: str) -> Any:
    """Set `msg.signature` for publication on `topic` (relative name, e.g. names.SHIELD_CHUNK;
    nothing to do without a key); returns `msg`."""
    if key is not None:
        msg.signature = sign(key, payload(msg, topic))
    return msg


def latch_state(msg: Any) -> LatchState:
    """An EstopState message as a LatchState."""
    return LatchState(bool(msg.active), str(msg.reason), str(msg.source), convert.time_from_msg(msg.header.stamp))


def signed(msg: Any, topic: str) -> Signed:
    """A received ActionChunk or EstopState as the driver's guard checks it."""
    return Signed(
        topic,
        payload(msg, topic),
        str(msg.signature),
        convert.time_from_msg(msg.header.stamp),
        int(msg.session),
        int(msg.sequence),
    )


class CommandSigner:
    """The shield's side of the command key: every message it signs for the driver carries
    its session (random, drawn when it starts) and the next number of one sequence shared by
    its chunks, e-stop states and heartbeats, so a driver takes each once and in order
    (core/replay.py SenderOrder). Without a key messages are numbered, not signed."""

    def __init__(self, key: bytes | None) -> None:
        self.key = key
        self.session = secrets.randbits(63) | 1  # never 0: 0 is "no session"
        self._sequence = itertools.count(1)  # next() is atomic: the heartbeat thread and callbacks share it

    def number(self, msg: Any) -> Any:
        """Give `msg` this shield's session and the next sequence number; returns it. Call it
        before anything else signs the message (the audit's signature covers both)."""
        msg.session, msg.sequence = self.session, next(self._sequence)
        return msg

    def sign(self, msg: Any, topic: str) -> Any:
        """Number `msg` (unless `number` did) and sign it for `topic`; returns it."""
        if not msg.sequence:
            self.number(msg)
        return sign_msg(self.key, msg, topic)
