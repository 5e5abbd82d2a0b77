"""Where a benchmark runs: one process pinned to one CPU (`one_core`), or its saved rows
computed by worker processes, each pinned to a CPU of its own (`saved_rows`, `--jobs N`).

Rows of seeded simulation episodes (the safety benchmark's) run in simulated time and are
independent of each other, so computing them side by side changes how long the benchmark
takes, not what it measures; the per-row timings they carry (shield decisions, perception)
are then taken with the other CPUs busy, which `results.json` records under `cpu`. Workers
are spawned, not forked: a fork of a process that has rendered with MuJoCo or started
Open3D's threads is not safe.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from carryon_bench.core.bench import saved_row

_WORKER_PINNING: list[Any] = []  # a worker's one_core(), entered for the worker's lifetime


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (all of them where affinity is not supported)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


@contextmanager
def one_core() -> Iterator[str]:
    """Pin this process to one CPU (and BLAS pools to one thread) while benchmarking."""
    previous = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        from threadpoolctl import threadpool_limits  # type: ignore[import-not-found]
    except ImportError:
        threadpool_limits = None
    limiter = threadpool_limits(1) if threadpool_limits else None
    try:
        if previous:
            cpu = min(previous)
            os.sched_setaffinity(0, {cpu})
            yield f"pinned to CPU {cpu} (os.sched_setaffinity), single-threaded queries"
        else:
            yield "not pinned (no sched_setaffinity here)"
    finally:
        if previous:
            os.sched_setaffinity(0, previous)
        if limiter is not None:
            limiter.unregister()


def _pin_worker(counter: Any, cpus: list[int]) -> None:
    """A worker's initializer: the next CPU of `cpus`, then one_core() on it for good."""
    with counter.get_lock():
        index = counter.value
        counter.value += 1
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpus[index % len(cpus)]})
    pinning = one_core()
    pinning.__enter__()
    _WORKER_PINNING.append(pinning)


def check_jobs(jobs: int) -> None:
    """Raise ValueError when `jobs` worker processes cannot each have a CPU of their own."""
    cpus = usable_cpus()
    if not 1 <= jobs <= len(cpus):
        raise ValueError(f"--jobs {jobs}: between 1 and the {len(cpus)} CPUs this process may use ({cpus})")


def saved_rows(
    rows: Path,
    computes: Mapping[str, Callable[[], dict[str, Any]]],
    jobs: int = 1,
    done: Callable[[str], None] = lambda _key: None,
) -> dict[str, dict[str, Any]]:
    """`saved_row` for each key (rows already saved are read back, as `--resume` wants),
    in this process one after another (`jobs` 1: pin it with one_core yourself) or in
    `jobs` worker processes pinned to CPUs of their own; the computes must then pickle (a
    functools.partial of a module-level function). `done(key)` as each row is there; a
    row that fails raises here once the rows already running have finished (and been saved:
    a resume does not run them again); the rows not yet started are not run."""
    check_jobs(jobs)
    if jobs == 1:
        out = {}
        for key, compute in computes.items():
            out[key] = saved_row(rows, key, compute)
            done(key)
        return out
    context = multiprocessing.get_context("spawn")
    counter = context.Value("i", 0)
    cpus = usable_cpus()[:jobs]
    finished: dict[str, dict[str, Any]] = {}
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=_pin_worker, initargs=(counter, cpus)) as pool:
        futures = {pool.submit(saved_row, rows, key, compute): key for key, compute in computes.items()}
        try:
            for future in as_completed(futures):
                key = futures[future]
                finished[key] = future.result()
                done(key)
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)  # the rows not started are not started
            raise
    return {key: finished[key] for key in computes}
