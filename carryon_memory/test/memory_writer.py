"""Writer processes for the durability tests (run by test_memory_durability.py, not by pytest).

python memory_writer.py zygote DIR
    Imports once, then forks on every `fork` line of stdin a child that writes to
    DIR forever (until SIGKILLed) and prints the child's pid. Forking from a warm
    process makes 200 kill-restart rounds take seconds instead of minutes.
python memory_writer.py burst DIR WRITER COUNT
    Waits for a line on stdin, then makes COUNT single-fact updates as writer WRITER
    (entity `writer<WRITER>`, keys k000..), each its own transaction, with a pause
    of up to 2 ms between them as between a client's requests (so the writers'
    transactions interleave instead of one re-taking the lock it just released).
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from pathlib import Path

from carryon_memory.core.store import MemoryStore
from carryon_memory.core.types import Fact, SceneOp, SceneUpdate


def write_forever(root: Path) -> None:
    store = MemoryStore(root, lock_timeout_s=30.0)  # opening finishes what the last killed writer left
    counter = store.version()
    while True:
        counter += 1
        facts = [Fact("counter", "n", str(counter))]
        if counter % 3 == 0:  # a multi-line transaction: several journal lines, one file replace
            facts += [Fact("batch", f"k{j}", f"{counter}-{j}") for j in range(4)]
        store.update_user("victim", facts, f"writer:{os.getpid()}", time.time())
        if counter % 5 == 0:
            contents = tuple(f"item{counter % 7}-{j}" for j in range(3))
            store.update_scene([SceneUpdate(SceneOp.SET_CONTENTS, "shelf", contents, source="writer")], time.time())


def zygote(root: Path) -> int:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # killed children are reaped by the kernel
    for line in sys.stdin:
        if line.strip() != "fork":
            continue
        pid = os.fork()
        if pid == 0:
            try:
                write_forever(root)
            finally:
                os._exit(1)
        print(pid, flush=True)
    return 0


def burst(root: Path, writer: int, count: int) -> int:
    store = MemoryStore(root, lock_timeout_s=60.0)
    rng = random.Random(writer)
    sys.stdin.readline()
    for index in range(count):
        time.sleep(rng.uniform(0.0, 0.002))
        store.update_user("shared", [Fact(f"writer{writer}", f"k{index:03d}", str(index))], f"writer{writer}", 1.0)
    return 0


def main(argv: list[str]) -> int:
    if argv[0] == "zygote":
        return zygote(Path(argv[1]))
    return burst(Path(argv[1]), int(argv[2]), int(argv[3]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
