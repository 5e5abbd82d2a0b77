"""Operator identities: Ed25519-signed requests are accepted only from an authorized
principal, unchanged, fresh and once; identity and authorized files with a problem are
refused with the reason. (Signing real ROS requests: test_request_auth below; the nodes'
checks against the running graph: test/test_faults_graph.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from carryon_common.core.errors import ConfigError
from carryon_common.core.operator_auth import (
    RequestVerifier,
    Unauthorized,
    create_identity,
    load_identity,
    operator_key_path,
    parse_authorized,
)


def identity(tmp_path: Path, principal: str):  # type: ignore[no-untyped-def]
    return load_identity(create_identity(tmp_path / f"{principal.replace(':', '_')}.key"), principal)


def test_only_an_authorized_unchanged_fresh_unused_signature_passes(tmp_path: Path) -> None:
    alice, mallory = identity(tmp_path, "operator:alice"), identity(tmp_path, "operator:mallory")
    verifier = RequestVerifier(parse_authorized(alice.public_line() + "\n# a comment\n\n", "operators"))
    payload = b"release the e-stop"
    signature = alice.sign(payload)
    assert verifier.check(payload, "operator:alice", 100.0, signature, 101.0) == "operator:alice"
    with pytest.raises(Unauthorized, match="replay"):
        verifier.check(payload, "operator:alice", 100.0, signature, 101.0)
    with pytest.raises(Unauthorized, match="does not verify"):
        verifier.check(b"release the e-stop!", "operator:alice", 100.0, alice.sign(payload), 101.0)
    with pytest.raises(Unauthorized, match="not an authorized principal"):
        verifier.check(payload, "operator:mallory", 100.0, mallory.sign(payload), 101.0)
    with pytest.raises(Unauthorized, match="does not verify"):  # mallory signs, claiming to be alice
        verifier.check(payload, "operator:alice", 100.0, mallory.sign(payload), 101.0)
    with pytest.raises(Unauthorized, match="stamped"):
        verifier.check(payload, "operator:alice", 50.0, alice.sign(b"old"), 101.0)
    with pytest.raises(Unauthorized, match="not signed"):
        verifier.check(payload, "", 100.0, "", 101.0)
    with pytest.raises(Unauthorized, match="does not verify"):
        verifier.check(payload, "operator:alice", 100.0, "not base64!", 101.0)


def test_identity_and_authorized_files_with_a_problem_are_refused_with_the_reason(tmp_path: Path) -> None:
    path = create_identity(tmp_path / "ops" / "alice.key")
    assert create_identity(path) == path and path.stat().st_mode & 0o777 == 0o600  # kept, owner only
    assert load_identity(path, "operator:alice").public_line() == load_identity(path, "operator:alice").public_line()
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by other users"):
        load_identity(path, "operator:alice")
    with pytest.raises(ConfigError, match="not a principal"):
        load_identity(path, "alice")
    with pytest.raises(ConfigError, match="make one with"):
        load_identity(tmp_path / "missing.key", "operator:alice")
    (tmp_path / "junk.key").write_text("junk")
    (tmp_path / "junk.key").chmod(0o600)
    with pytest.raises(ConfigError, match="not a PEM"):
        load_identity(tmp_path / "junk.key", "operator:alice")
    with pytest.raises(ConfigError, match="operators:2"):
        parse_authorized("# ok\noperator:alice\n", "operators")
    with pytest.raises(ConfigError, match="operators:1"):
        parse_authorized("someone AAAA\n", "operators")


def test_the_config_home_is_an_absolute_xdg_config_home_or_the_home_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert operator_key_path("ann") == tmp_path / "xdg" / "carryon" / "operators" / "ann.key"
    # A relative one would name another folder, and another key, in every working directory.
    monkeypatch.setenv("XDG_CONFIG_HOME", "runs/some-run/home")
    assert operator_key_path("ann") == tmp_path / "home" / ".config" / "carryon" / "operators" / "ann.key"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert operator_key_path("ann") == tmp_path / "home" / ".config" / "carryon" / "operators" / "ann.key"
