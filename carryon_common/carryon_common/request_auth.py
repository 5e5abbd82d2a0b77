"""Signing and checking requests that carry an `OperatorAuth` (carryon_common.core.operator_auth).

The signature covers the request's type and every field canonically encoded (as
carryon_common.signing does for the shield's messages), with `auth.signature` left out:
a signed UpdateUser cannot be replayed as anything else, nor changed in any field.

* Clients: `RosSession` and `CarryOnNode.call_service` sign every request and goal that
  has an `auth` field when they have an identity (`client_identity()` for the CLI and
  tools: this login's operator key when it exists).
* Servers: `RequestGate` (built from a node's `operators_file`) says who asks, or why
  the request is refused.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from carryon_common import convert
from carryon_common.core.errors import ConfigError
from carryon_common.core.operator_auth import (
    Identity,
    RequestVerifier,
    Unauthorized,
    default_operator,
    load_identity,
    operator_key_path,
)
from carryon_common.signing import payload

_PURPOSE = "carryon-request"


def request_payload(request: Any) -> bytes:
    """The bytes `request.auth.signature` covers."""
    auth = request.auth
    signature, auth.signature = auth.signature, ""
    try:
        return payload(request, _PURPOSE)
    finally:
        auth.signature = signature


def sign_request(identity: Identity | None, request: Any, now_s: float | None = None) -> Any:
    """Fill `request.auth` as `identity` (nothing to do without one, or without the field)."""
    if identity is None or not hasattr(request, "auth"):
        return request
    request.auth.principal = identity.principal
    request.auth.stamp = convert.time_to_msg(time.time() if now_s is None else now_s)
    request.auth.signature = identity.sign(request_payload(request))
    return request


def client_identity() -> Identity | None:
    """This login's operator identity when its key file exists (`carryon keys operator`,
    or made by `carryon up`), else None: requests go out unsigned. A key file that cannot
    be used is said on stderr, never raised: engaging the e-stop needs no identity."""
    path = operator_key_path()
    if not path.exists():
        return None
    try:
        return load_identity(path, f"operator:{default_operator()}")
    except ConfigError as exc:
        print(f"warning: operator identity unusable, requests go out unsigned: {exc}", file=sys.stderr)
        return None


class RequestGate:
    """A node's check of signed requests. Without an operators file every request passes
    as unauthenticated (principal ""); `secured` says which."""

    def __init__(self, operators_file: str) -> None:
        self.verifier = RequestVerifier.from_file(Path(operators_file)) if operators_file else None
        self.operators_file = operators_file

    @property
    def secured(self) -> bool:
        return self.verifier is not None

    def describe(self) -> str:
        if self.verifier is None:
            return "operators NOT authenticated (no operators_file): anyone on the DDS domain may ask"
        return f"operators authenticated ({len(self.verifier.keys)} principals in {self.operators_file})"

    def principal(self, request: Any, allowed: tuple[str, ...] = ("operator:", "node:")) -> str:
        """Who signed `request` ("" when not secured); Unauthorized says why it is refused.
        `allowed`: the principal kinds that may make this request."""
        if self.verifier is None:
            return ""
        auth = request.auth
        who = self.verifier.check(
            request_payload(request),
            auth.principal,
            convert.time_from_msg(auth.stamp),
            auth.signature,
            time.time(),
        )
        if not who.startswith(allowed):
            raise Unauthorized(f"{who} may not make this request (only {', '.join(allowed)})")
        return who


def load_node_identity(path: str, node_name: str) -> Identity | None:
    """A node's own identity (`identity_file`), or None when none is configured."""
    if not path:
        return None
    try:
        return load_identity(Path(path), f"node:{node_name}")
    except ConfigError as exc:
        raise ConfigError(f"identity_file: {exc}") from None


__all__ = ["RequestGate", "Unauthorized", "client_identity", "load_node_identity", "request_payload", "sign_request"]
