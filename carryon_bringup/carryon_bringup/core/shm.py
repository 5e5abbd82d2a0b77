"""Find and remove Fast DDS shared-memory files that no live process uses.

Fast DDS keeps its shared-memory transport in `/dev/shm` (segments `fastrtps_*`,
`fastdds_*` and their `sem.` semaphores). A cleanly stopped node removes its own; one
killed with SIGKILL leaves them behind, and such leftovers can stall the transport of
later participants that reuse the port. The launcher removes leftovers before it starts
and after it stops, but only files no live process maps or holds open (another graph on
the same machine keeps its files).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

SHM_DIR = Path("/dev/shm")
_PREFIXES = ("fastrtps_", "fastdds_", "sem.fastrtps_", "sem.fastdds_")


def dds_shm_files(shm_dir: Path = SHM_DIR) -> set[Path]:
    """Fast DDS shared-memory files currently present."""
    try:
        return {p for p in shm_dir.iterdir() if p.name.startswith(_PREFIXES)}
    except OSError:
        return set()


def files_in_use(proc: Path = Path("/proc"), ignore_pids: Iterable[int] = ()) -> set[Path]:
    """Files under /dev/shm that some live process (other than `ignore_pids`) maps or holds open."""
    used: set[Path] = set()
    ignored = {str(pid) for pid in ignore_pids}
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit() or pid_dir.name in ignored:
            continue
        try:
            for line in (pid_dir / "maps").read_text().splitlines():
                idx = line.find("/dev/shm/")
                if idx >= 0:
                    used.add(Path(line[idx:].split(" (deleted)")[0].strip()))
            for fd in (pid_dir / "fd").iterdir():
                target = fd.readlink()
                if str(target).startswith("/dev/shm/"):
                    used.add(target)
        except OSError:
            continue  # process exited or is not ours to read
    return used


def remove_stale(candidates: Iterable[Path], ignore_pids: Iterable[int] = ()) -> list[Path]:
    """Remove the candidates that still exist and no live process uses; return what was removed.

    `ignore_pids`: processes whose use does not count (the launcher passes itself: its
    own DDS participants are closed, but Fast DDS keeps segments mapped until exit).
    """
    present = [p for p in candidates if p.exists()]
    if not present:
        return []
    used = files_in_use(ignore_pids=ignore_pids)
    removed = []
    for path in present:
        if path in used:
            continue
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            pass  # removed concurrently or not ours
    return removed
