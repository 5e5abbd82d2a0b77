"""Who asks: operator identities, proven by Ed25519 signatures on their requests.

The requests that change what the robot does or remembers (e-stop release, Assist,
memory writes) carry an `OperatorAuth`: a principal, a wall-clock stamp and a signature
over the request (carryon_common/request_auth.py encodes it). A node given an
*authorized principals file* accepts such a request only when the signature verifies with
the public key listed for that principal, the stamp is within `max_age_s` of its clock,
and the signature has not been seen before (a replay).

* **Principals.** `operator:<name>` for people (an operator console, the CLI) and
  `node:<name>` for nodes that write on a request's behalf (planner_node's memory writes).
* **Identity files** hold an Ed25519 private key (PEM, readable by its owner only). An
  operator's lives in `$XDG_CONFIG_HOME/carryon/operators/<name>.key` (`carryon keys
  operator`); a node's in the run's key folder.
* **Authorized principals file**: one `<principal> <base64 public key> [users=<a,b>|users=*]`
  per line, `#` comments, like ssh's authorized_keys. `users=` binds an operator to the
  users whose memory and requests they may act for (`*`: every user); an operator line
  without it may act for **no** user (what the file does not grant is refused). A node
  acts for every user: the planner checks the operator behind each request. Nodes hold
  public keys only: no node can sign as an operator. `carryon up` writes one per run (the
  local operator with `users=*`, the nodes that sign requests, and the lines of
  `$XDG_CONFIG_HOME/carryon/authorized_operators`); a robot PC keeps one made by
  `carryon keys init`.
"""

from __future__ import annotations

import base64
import getpass
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import Field

from carryon_common.core.config import NodeConfig
from carryon_common.core.errors import CarryOnError, ConfigError
from carryon_common.core.replay import SeenSignatures

PRINCIPAL = re.compile(r"(operator|node):[a-z0-9][a-z0-9_.-]{0,63}")
MAX_AGE_S = 30.0
_REPLAYS_KEPT = 4096
EVERY_USER = "*"  # `users=*`, and what a request about every user's memory asks for


class Unauthorized(CarryOnError):
    """A request whose sender could not be proven (the message says why)."""


def config_home() -> Path:
    """`$XDG_CONFIG_HOME/carryon`, else `~/.config/carryon`. A relative XDG_CONFIG_HOME is
    ignored, as the XDG base directory specification asks: it would name another folder in
    every working directory, and with it another operator key."""
    configured = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(configured) if configured and Path(configured).is_absolute() else Path.home() / ".config"
    return base / "carryon"


def default_operator() -> str:
    """The operator name of this login (`CARRYON_OPERATOR`, else the user name)."""
    return os.environ.get("CARRYON_OPERATOR") or re.sub(r"[^a-z0-9_.-]", "-", getpass.getuser().lower())


def operator_key_path(name: str = "") -> Path:
    """`CARRYON_OPERATOR_KEY`, else `<config home>/operators/<name>.key`."""
    configured = os.environ.get("CARRYON_OPERATOR_KEY")
    if configured and not name:
        return Path(configured).expanduser()
    return config_home() / "operators" / f"{name or default_operator()}.key"


def authorized_operators_path() -> Path:
    """Operators every local run accepts besides this login's (one line each, see above)."""
    return config_home() / "authorized_operators"


@dataclass(frozen=True)
class Identity:
    principal: str
    key: Ed25519PrivateKey

    def sign(self, payload: bytes) -> str:
        return base64.b64encode(self.key.sign(payload)).decode()

    def public_line(self, users: str = "") -> str:
        """This identity's line for an authorized principals file; `users` (e.g. "alice,bob"
        or "*") binds an operator to the users it may act for."""
        raw = self.key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return f"{self.principal} {base64.b64encode(raw).decode()}" + (f" users={users}" if users else "")


def create_identity(path: Path) -> Path:
    """Write a new Ed25519 private key (PEM, mode 600) to `path`; an existing file is kept.
    Atomic: a concurrent reader sees no file or a whole one."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    try:
        os.link(temporary, path)  # fails when another process made it first: theirs is kept
    except FileExistsError:
        pass
    finally:
        temporary.unlink()
    return path


def load_identity(path: Path, principal: str) -> Identity:
    """The identity in `path` as `principal`; ConfigError names what is wrong."""
    if not PRINCIPAL.fullmatch(principal):
        raise ConfigError(f"{principal!r} is not a principal ('operator:<name>' or 'node:<name>', lower case)")
    path = path.expanduser()
    try:
        mode = path.stat().st_mode
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"identity {path}: {exc.strerror or exc}; make one with `carryon keys operator`") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"identity {path} is readable by other users (mode {mode & 0o777:o}); chmod 600 it")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except ValueError as exc:
        raise ConfigError(f"identity {path} is not a PEM private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"identity {path} is not an Ed25519 key")
    return Identity(principal, key)


@dataclass(frozen=True)
class Principal:
    """An authorized principal: its public key and the users it may act for (None: every user)."""

    key: Ed25519PublicKey
    users: frozenset[str] | None

    def may_act_for(self, user: str) -> bool:
        """Whether it may act for `user` (EVERY_USER: for all of them at once)."""
        return self.users is None or (user != EVERY_USER and user in self.users)

    def describe_users(self) -> str:
        return "every user" if self.users is None else ", ".join(sorted(self.users)) or "no user"


_USER = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


def _users(options: list[str], principal: str) -> frozenset[str] | None:
    """The `users=` option of a line: None for every user; an operator without it: none."""
    users: frozenset[str] | None = None if principal.startswith("node:") else frozenset()
    for option in options:
        name, _, value = option.partition("=")
        if name != "users" or not value:
            raise ValueError(f"unknown option {option!r} (expected users=<user,user,...> or users=*)")
        if value == EVERY_USER:
            users = None
            continue
        names = value.split(",")
        bad = [n for n in names if not _USER.fullmatch(n)]
        if bad:
            raise ValueError(f"users=: {', '.join(map(repr, bad))} is not a user id (lower case, digits, _ . -)")
        users = frozenset(names)
    return users


def parse_authorized(text: str, where: str) -> dict[str, Principal]:
    """principal -> its key and users, from an authorized principals file's text."""
    keys: dict[str, Principal] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        try:
            if len(parts) < 2 or not PRINCIPAL.fullmatch(parts[0]):
                raise ValueError(
                    "expected '<operator:name|node:name> <base64 Ed25519 public key> [users=<user,user,...>|users=*]'"
                )
            key = Ed25519PublicKey.from_public_bytes(base64.b64decode(parts[1], validate=True))
            keys[parts[0]] = Principal(key, _users(parts[2:], parts[0]))
        except ValueError as exc:
            raise ConfigError(f"{where}:{number}: {exc}") from None
    return keys


class RequestVerifier:
    """Checks signed requests against an authorized principals file (see the module docstring)."""

    def __init__(self, keys: dict[str, Principal], max_age_s: float = MAX_AGE_S) -> None:
        self.keys, self.max_age_s = keys, max_age_s
        self._seen = SeenSignatures(max_age_s, _REPLAYS_KEPT)

    @classmethod
    def from_file(cls, path: Path, max_age_s: float = MAX_AGE_S) -> RequestVerifier:
        try:
            text = path.expanduser().read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"authorized principals file {path}: {exc.strerror or exc}") from None
        return cls(parse_authorized(text, str(path)), max_age_s)

    def check(self, payload: bytes, principal: str, stamp_s: float, signature: str, now_s: float) -> str:
        """The proven principal; Unauthorized says why not."""
        if not principal:
            raise Unauthorized("the request is not signed (no operator identity); use the carryon CLI or sign it")
        key = self.keys.get(principal)
        if key is None:
            raise Unauthorized(f"{principal} is not an authorized principal here")
        if not abs(now_s - stamp_s) <= self.max_age_s:
            raise Unauthorized(f"the request is stamped {now_s - stamp_s:+.1f} s from now (limit {self.max_age_s:g} s)")
        try:
            key.key.verify(base64.b64decode(signature, validate=True), payload)
        except (InvalidSignature, ValueError):
            raise Unauthorized(f"the signature does not verify for {principal}") from None
        if signature in self._seen:
            raise Unauthorized("this signed request was already used (a replay)")
        self._seen.add(signature, stamp_s, now_s)
        return principal


class OperatorAuthConfig(NodeConfig):
    """The config of a node that serves requests carrying an OperatorAuth."""

    operators_file: str = Field(
        "",
        description=(
            "Authorized principals file: '<operator:name|node:name> <base64 Ed25519 public key>' per line. "
            "Requests that release the e-stop, start an Assist or write memory must be signed by one of them "
            "('' = none given: `carryon up` and the launch file make one per run; a node started alone "
            "authenticates nobody and says so in its status)."
        ),
    )


class NodeIdentityConfig(NodeConfig):
    """The config of a node that signs as `node:<its name>`: the decisions it publishes (the
    recorder's audit verifies them) and, where `signs_requests`, requests to other nodes."""

    signs_requests: ClassVar[bool] = False  # its key is also an authorized principal for requests
    identity_file: str = Field(
        "",
        description=(
            "Ed25519 private key (PEM) this node signs with as node:<its name>: the decisions it publishes "
            "(checked by the recorder's audit) and, for planner_node, its memory writes ('' = none given: "
            "`carryon up` and the launch file make one per run; a node started alone signs nothing)."
        ),
    )
