"""The hash-chained audit log: appends verify; every kind of tampering is named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from carryon_common.core.audit import AuditError, AuditLog, verify


def write(path: Path, n: int = 5) -> list[dict]:  # type: ignore[type-arg]
    with AuditLog(path) as log:
        return [log.append("shield.block", "shield_node", {"chunk": i, "reason": "bottle 0.012 m"}) for i in range(n)]


def test_appends_verify_and_reopening_continues_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "run" / "audit.jsonl"
    entries = write(path, 3)
    assert verify(path).ok and verify(path).entries == 3
    with AuditLog(path) as log:
        fourth = log.append("plan", "planner_node", {"plan_id": "p1"})
    assert fourth["seq"] == 4 and fourth["prev"] == entries[-1]["hash"]
    check = verify(path, expect_last=fourth["hash"])
    assert check.ok and check.entries == 4


@pytest.mark.parametrize(
    ("tamper", "problem"),
    [
        (lambda lines: lines.__setitem__(2, lines[2].replace("0.012", "0.120")), "line 3: content changed"),
        (lambda lines: lines.pop(1), "line 2: does not follow line 1"),
        (lambda lines: lines.insert(3, lines[1]), "line 4: does not follow line 3"),
        (lambda lines: lines.__setitem__(4, lines[4][:20]), "line 5: not JSON"),
        (lambda lines: lines.__setitem__(0, json.dumps({"hello": 1})), "line 1: not an audit entry"),
    ],
)
def test_tampering_is_named(tmp_path: Path, tamper, problem: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "audit.jsonl"
    write(path)
    lines = path.read_text().splitlines()
    tamper(lines)
    path.write_text("\n".join(lines) + "\n")
    check = verify(path)
    assert not check.ok and problem in check.problem, check.problem
    with pytest.raises(AuditError, match="not appending to a broken chain"):
        AuditLog(path)


def test_lines_cut_off_the_end_are_caught_against_the_recorded_last_hash(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    last = write(path)[-1]["hash"]
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:3]))
    assert verify(path).ok  # a shorter chain is still a chain...
    check = verify(path, expect_last=last)
    assert not check.ok and "cut off the end" in check.problem  # ...but not the one recorded


def test_the_cli_verifies(tmp_path: Path) -> None:
    from carryon_bringup.cli.main import main

    path = tmp_path / "audit.jsonl"
    last = write(path)[-1]["hash"]
    # An unkeyed log: with the key (here a fresh one) it fails, with --key '' the chain alone is checked.
    key_file = tmp_path / "audit.key"
    key_file.write_text("ab" * 32)
    key_file.chmod(0o600)
    assert main(["audit", "verify", str(path), "--last", last, "--key", str(key_file)]) == 1
    assert main(["audit", "verify", str(path), "--last", last, "--key", ""]) == 0
    path.write_text(path.read_text().replace("shield_node", "someone"))
    assert main(["audit", "verify", str(path), "--key", ""]) == 1


def _rewrite_without(path: Path, kind: str, mac_key: bytes | None) -> None:
    """What an intruder does: drop every entry of `kind` and recompute a consistent chain
    (the SHA-256 scheme is public); MACs made with `mac_key` (not the audit key) or none."""
    import hashlib
    import hmac

    prev, out = "0" * 64, []
    kept = [e for e in map(json.loads, path.read_text().splitlines()) if e["kind"] != kind]
    for seq, original in enumerate(kept, start=1):
        entry = {k: v for k, v in original.items() if k not in ("hash", "mac")}
        entry.update(seq=seq, prev=prev)
        text = json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        entry["hash"] = prev = hashlib.sha256(text.encode()).hexdigest()
        if mac_key is not None:
            entry["mac"] = hmac.new(mac_key, prev.encode(), hashlib.sha256).hexdigest()
        out.append(json.dumps(entry, sort_keys=True, separators=(",", ":")))
    path.write_text("\n".join(out) + "\n")


@pytest.mark.parametrize("intruder_key", [None, b"k" * 32], ids=["macs-stripped", "other-key"])
def test_a_chain_rewritten_without_the_key_fails_keyed_verification(tmp_path: Path, intruder_key) -> None:  # type: ignore[no-untyped-def]
    from carryon_bringup.cli.main import main

    key = bytes(range(32))
    path = tmp_path / "audit.jsonl"
    with AuditLog(path, key=key) as log:
        log.append("plan", "planner_node", {"plan_id": "p1"})
        log.append("estop", "shield_node", {"active": True})
        log.append("shield.block", "shield_node", {"chunk": 3})
    check = verify(path, key=key)
    assert check.ok and check.keyed and check.entries == 3
    with pytest.raises(AuditError, match="MAC"):
        AuditLog(path, key=b"x" * 32)  # never appended to under another key
    _rewrite_without(path, "estop", intruder_key)
    assert verify(path).ok  # the bare hash chain cannot tell ...
    check = verify(path, key=key)  # ... the MACs can
    assert not check.ok and "line 1:" in check.problem and "rewritten without the audit key" in check.problem
    key_file = tmp_path / "audit.key"
    key_file.write_text(key.hex())
    key_file.chmod(0o600)
    assert main(["audit", "verify", str(path), "--key", str(key_file)]) == 1
    assert main(["audit", "verify", str(path), "--key", ""]) == 0
