"""Signing and checking requests that carry an `OperatorAuth` (carryon_common.core.operator_auth).

The signature covers the request's type and every field canonically encoded (as
carryon_common.signing does for the shield's messages), with `auth.signature` left out:
a signed UpdateUser cannot be replayed as anything else, nor changed in any field.

* Clients: `RosSession` and `CarryOnNode.call_service` sign every request and goal that
  has an `auth` field when they have an identity (`client_identity()` for the CLI and
  tools: this login's operator key when it exists).
* Servers: `RequestGate` (built from a node's `operators_file`) says who asks, or why
  the request is refused.
* Decisions: the nodes whose messages are the audit log's decisions (plan states, shield
  events, verdicts, memory changes, the e-stop state) sign them the same way as
  `node:<name>` (`sign_decision`, under a purpose of their own); the recorder's
  `DecisionCheck` logs what does not verify as forged, never as that node's decision.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from carryon_common import convert
from carryon_common.core import names
from carryon_common.core.errors import ConfigError
from carryon_common.core.operator_auth import (
    EVERY_USER,
    Identity,
    RequestVerifier,
    Unauthorized,
    default_operator,
    load_identity,
    operator_key_path,
)
from carryon_common.signing import payload

# Who may make the requests that only an operator or the planner's executive makes (RunPolicy,
# Recover goals, memory reads, the simulator's contact task): RequestGate.principal's `allowed`.
OPERATOR_OR_PLANNER = ("operator:", f"node:{names.PLANNER_NODE}")
OPERATORS = ("operator:",)

_PURPOSE = "carryon-request"
_DECISION = "carryon-decision:"


def request_payload(request: Any) -> bytes:
    """The bytes `request.auth.signature` covers."""
    auth = request.auth
    signature, auth.signature = auth.signature, ""
    try:
        return payload(request, _PURPOSE)
    finally:
        auth.signature = signature


def decision_payload(msg: Any, topic: str) -> bytes:
    """The bytes a decision message's `auth.signature` covers: its fields (`auth.signature`
    and an HMAC `signature` left out) and the topic it is published on, under a purpose of
    its own, so a signed plan state is neither a request nor a memory change."""
    auth = msg.auth
    signature, auth.signature = auth.signature, ""
    try:
        return payload(msg, _DECISION + topic)
    finally:
        auth.signature = signature


def sign_decision(identity: Identity | None, msg: Any, topic: str) -> Any:
    """Fill `msg.auth` as `identity` for publication on `topic` (a relative name, e.g.
    names.PLAN_STATE); nothing to do without an identity. Returns `msg`."""
    if identity is None:
        return msg
    msg.auth.principal = identity.principal
    msg.auth.stamp = convert.time_to_msg(time.time())
    msg.auth.signature = identity.sign(decision_payload(msg, topic))
    return msg


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

    def principal(
        self, request: Any, allowed: tuple[str, ...] = ("operator:", "node:"), *, user: str | None = None
    ) -> str:
        """Who signed `request` ("" when not secured); Unauthorized says why it is refused.
        `allowed`: who may make this request, principal kinds ("operator:") or principals
        ("node:planner_node"). `user`: whose memory or requests it concerns (EVERY_USER:
        everyone's), which the principal's `users=` must grant."""
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
        if not any(who == a or (a.endswith(":") and who.startswith(a)) for a in allowed):
            raise Unauthorized(f"{who} may not make this request (only {', '.join(allowed)})")
        granted = self.verifier.keys[who]
        if user is not None and not granted.may_act_for(user):
            whom = "every user" if user == EVERY_USER else f"user {user!r}"
            raise Unauthorized(
                f"{who} may not act for {whom} (its line in {self.operators_file} grants: {granted.describe_users()}; "
                "add users=... to it)"
            )
        return who


def authorize(
    gate: RequestGate | None,
    request: Any,
    allowed: tuple[str, ...],
    what: str,
    logger: Any,
    *,
    user: str | None = None,
) -> tuple[str | None, str]:
    """A node's check of one signed request: (who signed it, "" when the node checks nobody;
    or None when refused, with the reason to answer and log). A refusal is logged as a
    warning naming `what`, an authenticated request as info naming who asked."""
    if gate is None:
        return "", ""
    try:
        who = gate.principal(request, allowed, user=user)
    except Unauthorized as exc:
        logger.warning(f"{what} REFUSED: {exc}")
        return None, f"refused: {exc}"
    if who:
        logger.info(f"{what} by {who}")
    return who, ""


class DecisionCheck:
    """Who sent a decision message (the recorder's audit): the node whose key in the run's
    publishers file verifies its `auth`. Without a publishers file nothing is verified
    (`secured` False) and every message counts as its topic's node."""

    def __init__(self, publishers_file: str) -> None:
        # Ages are loose: a latched state may reach a late recorder; replays are still refused.
        self.verifier = RequestVerifier.from_file(Path(publishers_file), max_age_s=120.0) if publishers_file else None

    @property
    def secured(self) -> bool:
        return self.verifier is not None

    def check(self, msg: Any, topic: str, node: str) -> None:
        """Unauthorized unless `msg` (received on `topic`, relative name) is signed by `node`."""
        if self.verifier is None:
            return
        auth = msg.auth
        if auth.principal and auth.principal != f"node:{node}":
            raise Unauthorized(f"signed by {auth.principal}, not node:{node}")
        if not auth.principal:
            raise Unauthorized(f"not signed (node:{node} signs everything it publishes here)")
        self.verifier.check(
            decision_payload(msg, topic), auth.principal, convert.time_from_msg(auth.stamp), auth.signature, time.time()
        )


def load_node_identity(path: str, node_name: str) -> Identity | None:
    """A node's own identity (`identity_file`), or None when none is configured."""
    if not path:
        return None
    try:
        return load_identity(Path(path), f"node:{node_name}")
    except ConfigError as exc:
        raise ConfigError(f"identity_file: {exc}") from None


__all__ = [
    "EVERY_USER",
    "OPERATORS",
    "OPERATOR_OR_PLANNER",
    "DecisionCheck",
    "RequestGate",
    "Unauthorized",
    "authorize",
    "client_identity",
    "decision_payload",
    "load_node_identity",
    "request_payload",
    "sign_decision",
    "sign_request",
]
