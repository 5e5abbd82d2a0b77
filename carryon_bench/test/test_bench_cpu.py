"""bench/cpu.py: rows computed side by side in worker processes pinned to CPUs of their
own (`carryon bench safety --jobs N`), saved as they finish and read back on a resume."""

from __future__ import annotations

import json
import os
import time
from functools import partial
from pathlib import Path

import pytest

from carryon_bench.cpu import check_jobs, saved_rows, usable_cpus


def where(name: str) -> dict[str, object]:
    """A row that says which process and CPUs computed it (module-level: it must pickle)."""
    return {"name": name, "pid": os.getpid(), "cpus": sorted(os.sched_getaffinity(0))}


def refuse(_name: str) -> dict[str, object]:
    raise AssertionError("a saved row was computed again")


@pytest.mark.skipif(len(usable_cpus()) < 2, reason="needs 2 CPUs to pin two workers apart")
def test_two_workers_on_cpus_of_their_own_save_every_row_and_a_resume_reads_them(tmp_path: Path) -> None:
    keys = [f"row{i}" for i in range(4)]
    done: list[str] = []
    rows = saved_rows(tmp_path, {k: partial(where, k) for k in keys}, jobs=2, done=done.append)
    assert list(rows) == keys and sorted(done) == keys  # in the order asked, whatever order they finished
    assert all(json.loads((tmp_path / f"{k}.json").read_text()) == rows[k] for k in keys)
    assert {r["pid"] for r in rows.values()}.isdisjoint({os.getpid()})  # none in this process
    assert all(len(r["cpus"]) == 1 for r in rows.values())  # each worker pinned to one CPU ...
    by_pid = {r["pid"]: tuple(r["cpus"]) for r in rows.values()}
    assert len(set(by_pid.values())) == len(by_pid)  # ... and no two workers to the same one
    again = saved_rows(tmp_path, {k: partial(refuse, k) for k in keys}, jobs=2)
    assert again == rows  # --resume: nothing computed again


def slow_or_failing(name: str) -> dict[str, object]:
    if name == "row0":
        raise RuntimeError("episode crashed")
    time.sleep(0.5)
    return {"name": name}


@pytest.mark.skipif(len(usable_cpus()) < 2, reason="needs 2 CPUs to pin two workers apart")
def test_a_failing_row_raises_and_the_rows_not_started_are_not_run(tmp_path: Path) -> None:
    keys = [f"row{i}" for i in range(12)]
    with pytest.raises(RuntimeError, match="episode crashed"):
        saved_rows(tmp_path, {k: partial(slow_or_failing, k) for k in keys}, jobs=2)
    saved = sorted(p.stem for p in tmp_path.glob("*.json"))
    assert "row0" not in saved and len(saved) < len(keys) - 1, saved  # what ran is kept, the rest never ran


def test_more_jobs_than_cpus_is_refused() -> None:
    check_jobs(1)
    with pytest.raises(ValueError, match="between 1 and the"):
        check_jobs(len(usable_cpus()) + 1)


def test_the_cli_refuses_jobs_where_they_cannot_be_had(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from carryon_bringup.cli.common import EXIT_USAGE
    from carryon_bringup.cli.main import main

    run_dir = str(tmp_path / "run")
    (tmp_path / "run").mkdir()
    assert main(["bench", "latency", "--jobs", "2", "--resume", run_dir]) == EXIT_USAGE
    assert "latency runs in one process" in capsys.readouterr().err
    too_many = str(len(usable_cpus()) + 1)
    assert main(["bench", "safety", "--jobs", too_many, "--resume", run_dir]) == EXIT_USAGE
    assert f"--jobs {too_many}: between 1 and the" in capsys.readouterr().err
    assert not any((tmp_path / "run").iterdir())  # nothing ran, nothing written
