"""Durability: writers SIGKILLed mid-write, concurrent writers in several processes, crash
points of a transaction, the lock timeout."""

from __future__ import annotations

import fcntl
import itertools
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from carryon_memory.core.errors import LockTimeout
from carryon_memory.core.journal import Journal, sha256
from carryon_memory.core.markdown import SectionDoc
from carryon_memory.core.store import MemoryStore
from carryon_memory.core.transaction import Writer
from carryon_memory.core.types import Fact

WRITER = Path(__file__).with_name("memory_writer.py")
FILES = ("users/victim.md", "scene.md")


def committed_states(root: Path) -> dict[str, tuple[set[str | None], str | None]]:
    """Per file: every content (sha) it had at a committed version, and the latest one."""
    journal = Journal(root)
    journal.refresh()
    states = {}
    for rel in FILES:
        changes = journal.by_file.get(rel, [])
        seen = {changes[0].before} if changes else {None}
        states[rel] = (seen | {c.after for c in changes}, changes[-1].after if changes else None)
    return states


def file_sha(path: Path) -> str | None:
    return sha256(path.read_bytes()) if path.exists() else None


@pytest.mark.slow  # ~15 s: 200 fork / kill / verify rounds
def test_200_sigkills_mid_write_always_leave_a_committed_parsable_version(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    MemoryStore(root)
    rng = random.Random(5)
    zygote = subprocess.Popen(
        [sys.executable, str(WRITER), "zygote", str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert zygote.stdin is not None and zygote.stdout is not None
    in_flight = torn_journal = 0
    recovered: list[str] = []
    started = time.monotonic()
    try:
        for round_ in range(200):
            zygote.stdin.write("fork\n")
            zygote.stdin.flush()
            pid = int(zygote.stdout.readline())
            time.sleep(rng.uniform(0.005, 0.04))
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.001)
            else:
                pytest.fail(f"writer {pid} did not die")
            in_flight += bool((root / ".lock").read_bytes().strip())
            journal = root / "journal.jsonl"
            torn_journal += journal.exists() and not journal.read_bytes().endswith(b"\n")

            # What a reader sees right after the kill: a whole file of some committed version.
            states = committed_states(root)
            for rel in FILES:
                path = root / rel
                assert file_sha(path) in states[rel][0], f"round {round_}: {rel} is not a committed version"
                if path.exists():
                    assert SectionDoc.from_bytes(path.read_bytes(), rel).problems == []

            # After recovery (the next writer or a restart): exactly the latest committed version.
            store = MemoryStore(root)
            recovered += store.recovered
            states = committed_states(root)
            for rel in FILES:
                assert file_sha(root / rel) == states[rel][1], f"round {round_}: {rel} not rolled to the last commit"
            assert store.problems() == []
            versions = [c.version for c in store.history()][::-1]
            assert versions == list(range(1, len(versions) + 1))  # gap-free, no duplicates
            assert not [p for p in root.rglob("*") if ".tmp-" in p.name]
    finally:
        zygote.kill()
        zygote.wait()
    elapsed = time.monotonic() - started
    changes = len(MemoryStore(root).history())
    print(
        f"\n200 SIGKILLs in {elapsed:.1f} s: {changes} committed changes, {in_flight} kills inside a commit "
        f"({sum('rolled forward' in r for r in recovered)} rolled forward, "
        f"{sum('discarded' in r for r in recovered)} discarded), {torn_journal} torn journal tails"
    )
    assert changes > 100  # the writers made progress between kills
    assert in_flight > 0  # some kills landed mid-commit (the case this test is about)


def test_two_processes_200_updates_each_lose_nothing(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    MemoryStore(root)
    writers = [
        subprocess.Popen(
            [sys.executable, str(WRITER), "burst", str(root), str(n), "200"], stdin=subprocess.PIPE, text=True
        )
        for n in (1, 2)
    ]
    time.sleep(0.5)  # both have imported and opened the store
    started = time.monotonic()
    for writer in writers:
        assert writer.stdin is not None
        writer.stdin.write("go\n")
        writer.stdin.flush()
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    elapsed = time.monotonic() - started

    store = MemoryStore(root)
    changes = store.history()[::-1]
    assert [c.version for c in changes] == list(range(1, 401))
    assert sorted(c.source for c in changes) == ["writer1"] * 200 + ["writer2"] * 200
    switches = sum(a.source != b.source for a, b in itertools.pairwise(changes))
    assert switches >= 20  # the writers really ran concurrently: each re-read what the other had just written
    facts = {(f.entity, f.key): f.value for f in store.context("shared").facts}
    assert len(facts) == 400 and facts[("writer2", "k199")] == "199"
    assert sha256((root / "users/shared.md").read_bytes()) == changes[-1].after
    for change in changes:  # each change's `before` is the previous change's `after`: no lost update
        assert change.before == (None if change.version == 1 else changes[change.version - 2].after)
    print(f"\n2 x 200 concurrent updates in {elapsed:.1f} s, writers interleaved {switches} times")


class Crash(BaseException):
    """Stands in for SIGKILL at a chosen point of a commit (a BaseException, like a kill)."""


@pytest.mark.parametrize("point", ["before_journal", "torn_journal", "after_journal", "after_replace"])
def test_every_crash_point_of_a_commit_is_recovered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    root = tmp_path / "memory"
    store = MemoryStore(root)
    store.update_user("alice", [Fact("diet", "preference", "vegetarian")], "op", 1.0)
    committed = (root / "users/alice.md").read_bytes()
    journal_before = (root / "journal.jsonl").read_bytes()

    original_append, original_put = Journal.append, Writer.put

    def append(self: Journal, changes: list) -> None:  # type: ignore[type-arg]
        if point == "before_journal":
            raise Crash
        if point == "torn_journal":
            with self.path.open("ab") as stream:
                stream.write(b'{"version": 2, "txn": 2, "txn_s')
            raise Crash
        original_append(self, changes)

    def put(self: Writer, rel: str, data: bytes | None) -> None:
        if point == "after_journal":
            raise Crash
        original_put(self, rel, data)
        if point == "after_replace":
            raise Crash

    monkeypatch.setattr(Journal, "append", append)
    monkeypatch.setattr(Writer, "put", put)
    with pytest.raises(Crash):
        store.update_user("alice", [Fact("diet", "preference", "vegan"), Fact("mug", "colour", "red")], "op", 2.0)
    monkeypatch.undo()
    assert (root / ".lock").read_bytes(), "the marker of the interrupted transaction is left"

    reopened = MemoryStore(root)
    text = (root / "users/alice.md").read_text()
    if point in ("before_journal", "torn_journal"):
        assert (root / "users/alice.md").read_bytes() == committed
        assert (root / "journal.jsonl").read_bytes() == journal_before
        assert reopened.version() == 1 and "discarded" in reopened.recovered[0]
    else:
        assert "vegan" in text and "red" in text
        assert reopened.version() == 3 and "rolled forward" in reopened.recovered[0]
    assert (root / ".lock").read_bytes() == b""
    assert reopened.problems() == []
    reopened.update_user("alice", [Fact("drink", "wish", "tea")], "op", 3.0)  # and writing goes on
    assert next(c.version for c in reopened.history()) == reopened.version()


def test_a_writer_waits_at_most_lock_timeout_s(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "memory", lock_timeout_s=0.3)
    fd = os.open(store.root / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another process holds the lock
        started = time.monotonic()
        with pytest.raises(LockTimeout, match=r"lock_timeout_s=0\.3 s; nothing was changed"):
            store.update_user("alice", [Fact("diet", "preference", "vegan")], "op", 1.0)
        assert 0.3 <= time.monotonic() - started < 1.0
        assert store.context("").scene == ()  # reads never wait for the lock
    finally:
        os.close(fd)
    assert not (store.root / "users/alice.md").exists()
    store.update_user("alice", [Fact("diet", "preference", "vegan")], "op", 1.0)
