"""carryon_policy.bag_dataset: the executed steps of released chunks become dataset frames
with the observation of their instant (a recorder bag read for real: test/test_recorder_graph.py;
written as a LeRobotDataset: carryon_sim/test/test_learned_policy.py, with the LeRobot extra)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from carryon_common.core.chunk import Chunk, ChunkSource, Convention
from carryon_policy import bag_dataset
from carryon_policy.bag_dataset import BagDatasetError, Recording, Series, episodes_of
from carryon_policy.core import learned_layout, rotations

MS = 1_000_000
DOWN = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])


def chunk(
    first_x: float,
    subtask: str = "s1",
    *,
    source: ChunkSource = ChunkSource.POLICY,
    n: int = 16,
    convention: Convention = Convention.ABSOLUTE,
    frame: str = "world",
) -> Chunk:
    """n steps 1 cm apart along x from `first_x`, the tool pointing down, gripper closing."""
    positions = np.column_stack([first_x + 0.01 * np.arange(n), np.zeros(n), np.full(n, 0.5)])
    if convention == Convention.DELTA:
        positions = np.tile([0.01, 0.0, 0.0], (n, 1))
    rotvec = rotations.matrix_to_rotvec(DOWN) if convention == Convention.ABSOLUTE else np.zeros(3)
    rotvecs = np.tile(rotvec, (n, 1))
    return Chunk(1, subtask, source, convention, frame, 0.05, 1, 0.0, positions, rotvecs, np.linspace(0.0, 1.0, n))


def recording(chunks: list[tuple[int, Chunk]], *, camera_period_ms: int = 50, until_ms: int = 3000) -> Recording:
    """Sensors every 10 ms (images every `camera_period_ms`), each image filled with its
    stamp in 10 ms units, the tool at x = stamp in seconds."""
    out = Recording(chunks=chunks, images={c: Series() for c in ("scene", "wrist")})
    out.subtasks = {"s1": ("put the carrot in the bowl", bag_dataset.SUCCEEDED), "s2": ("open the pink cover", 4)}
    for t in range(0, until_ms, 10):
        stamp = t * MS
        out.poses.add(stamp, (np.array([t / 1000, 0.0, 0.5]), DOWN, "world"))
        out.widths.add(stamp, 0.04)
        out.joints.add(stamp, np.arange(7, dtype=np.float32))
        if t % camera_period_ms == 0:
            for camera in out.images:
                out.images[camera].add(stamp, np.full((96, 96, 3), (t // 10) % 256, dtype=np.uint8))
    return out


def test_a_chunk_runs_until_the_next_replaces_it_and_each_step_takes_its_instants_observation() -> None:
    first, second = chunk(0.3), chunk(0.5)
    episodes = episodes_of(recording([(100 * MS, first), (500 * MS, second)]))
    (episode,) = episodes
    assert episode.task == "put the carrot in the bowl" and episode.succeeded
    assert len(episode.frames) == 8 + 16  # 400 ms of the first chunk at 50 ms a step, then all of the second
    for k, frame in enumerate(episode.frames[:8]):
        assert frame["action"][0] == pytest.approx(0.3 + 0.01 * k)
        assert frame["observation.images.scene"][0, 0, 0] == (100 + 50 * k) // 10  # the image of that instant
        assert frame[learned_layout.STATE_KEY][0] == pytest.approx((100 + 50 * k) / 1000)
    assert episode.frames[8]["action"][0] == pytest.approx(0.5)
    action = episode.frames[0]["action"]
    assert np.allclose(rotations.rot6d_to_matrix(action[3:9]), DOWN, atol=1e-6)
    assert action[9] == 0.0 and episode.frames[-1]["action"][9] == pytest.approx(1.0)
    state = episode.frames[0][learned_layout.STATE_KEY]
    assert state[9] == pytest.approx(1.0 - 0.04 / learned_layout.GRIPPER_MAX_WIDTH_M)
    assert episode.frames[0][learned_layout.JOINTS_KEY].tolist() == list(range(7))


def test_subtasks_make_episodes_and_other_sources_are_left_out() -> None:
    chunks = [
        (0, chunk(0.3, "s1")),
        (800 * MS, chunk(0.3, "s1", source=ChunkSource.RECOVERY)),
        (1600 * MS, chunk(0.3, "s1")),
        (2400 * MS, chunk(0.3, "s2")),
    ]
    skipped: Counter[str] = Counter()
    episodes = episodes_of(recording(chunks, until_ms=4000), skipped=skipped)
    assert [(e.subtask_id, len(e.frames)) for e in episodes] == [("s1", 32), ("s2", 16)]
    assert skipped == {"recovery chunk": 16}
    assert [e.succeeded for e in episodes] == [True, False]
    with_recovery = episodes_of(recording(chunks, until_ms=4000), sources=("policy", "recovery"))
    assert len(with_recovery[0].frames) == 48


def test_steps_without_a_fresh_image_are_skipped_and_counted() -> None:
    skipped: Counter[str] = Counter()
    (episode,) = episodes_of(recording([(0, chunk(0.3))], camera_period_ms=1000), max_age_s=0.1, skipped=skipped)
    assert len(episode.frames) == 3  # 0, 50, 100 ms: at most 100 ms after the image at 0; the rest are stale
    assert sum(skipped.values()) == 13 and all("observation.images" in reason for reason in skipped)


def test_delta_steps_compose_from_the_last_commanded_target() -> None:
    (episode,) = episodes_of(recording([(0, chunk(0.0, convention=Convention.DELTA))]))
    xs = [f["action"][0] for f in episode.frames]
    assert xs == pytest.approx([0.01 * (k + 1) for k in range(16)])  # from the measured pose at x = 0


def test_what_cannot_become_a_dataset_is_said() -> None:
    with pytest.raises(BagDatasetError, match=r"frame 'panda_link0' but ee_pose in 'world'"):
        episodes_of(recording([(0, chunk(0.3, frame="panda_link0"))]))
    with pytest.raises(BagDatasetError, match=r"no instruction for subtask 'x'.*--task"):
        episodes_of(recording([(0, chunk(0.3, "x"))]))
    (episode,) = episodes_of(recording([(0, chunk(0.3, "x"))]), task="wave")
    assert episode.task == "wave" and not episode.succeeded


def test_a_folder_that_is_no_bag_is_refused_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "dataset"
    assert bag_dataset.main(["--bag", str(tmp_path), "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith("error: ") and not out.exists()
