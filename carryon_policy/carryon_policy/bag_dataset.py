"""recorder_node bags -> a LeRobotDataset: runs on the robot (or in the simulated graph)
as demonstrations in the same format as the simulator's (carryon_policy.core.learned_layout).

A frame is one control step the arm executed: the shield's released chunks
(`shield/chunk`) say what was commanded when, each step `dt` after the last, until the
next released chunk replaces the rest. At each step's time the frame takes the newest
image of each camera the policy reads (`camera/<name>/color`), the tool pose (`ee_pose`),
the gripper width (`gripper/width`) and the arm's joints (`joint_states`), none older than
`max_age_s` (a frame without them is skipped and counted); its action is the step's
absolute tool target and gripper command (delta chunks composed as the driver composes
them, core.chunk.tool_targets). Times are the messages' header stamps (the node clock);
the gripper width, which has no header, is placed on that clock by the recording's offset
between receive times and `ee_pose` stamps. An episode is one plan subtask (the chunks'
`subtask_id`), its task text the subtask's instruction from `planner/plan_state` (or
`--task`); `--only-succeeded` keeps the subtasks the plan marked succeeded.

What the recorder must keep for this (its defaults keep images at 1 Hz and the scene
camera only): `recorder_node.dataset_rate_hz` set to the control rate (e.g. `carryon up
--set recorder_node.dataset_rate_hz=20`) adds both cameras at that rate, `joint_states`
and the plan (docs/learned_policy.md).
Reading needs no ROS (rosbags); writing needs the LeRobot extra (.venv-lerobot):

    python -m carryon_policy.bag_dataset --bag BAG [--bag BAG ...] --out DIR [--only-succeeded] [--task TEXT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from carryon_common.core.chunk import Chunk, ChunkSource, Convention, tool_targets
from carryon_common.core.message_fields import chunk_from_fields, image_from_fields, nanoseconds
from carryon_policy.core import learned_layout, rotations
from carryon_policy.core.observation_mapping import resize_image
from carryon_policy.core.policy import RobotState

REPO_ID = "carryon/recorded_runs"
SUCCEEDED = 3  # SubtaskState.STATE_SUCCEEDED
SOURCES = {"policy": ChunkSource.POLICY, "recovery": ChunkSource.RECOVERY, "operator": ChunkSource.OPERATOR}
DEFAULT_SOURCES = ("policy", "operator")  # what the VLA or a person commanded; not recovery, not retreats


class BagDatasetError(ValueError):
    """The bag cannot give a dataset: what is missing and how to record it."""


@dataclass
class Series:
    """Stamped values (ns, in stamp order once `freeze`d)."""

    stamps: list[int] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    _array: np.ndarray | None = field(default=None, repr=False)  # the stamps for lookups, made once

    def add(self, stamp_ns: int, value: Any) -> None:
        self.stamps.append(stamp_ns)
        self.values.append(value)
        self._array = None

    def freeze(self) -> Series:
        order = np.argsort(np.asarray(self.stamps, dtype=np.int64), kind="stable")
        return Series([self.stamps[i] for i in order], [self.values[i] for i in order])

    def at(self, stamp_ns: int, max_age_ns: int) -> Any | None:
        """The newest value stamped at or before `stamp_ns`, None when none is that fresh."""
        if self._array is None:
            self._array = np.asarray(self.stamps, dtype=np.int64)
        index = int(np.searchsorted(self._array, stamp_ns, side="right")) - 1
        if index < 0 or stamp_ns - self.stamps[index] > max_age_ns:
            return None
        return self.values[index]


@dataclass
class Recording:
    """What a bag holds for a dataset, on the node clock."""

    chunks: list[tuple[int, Chunk]] = field(default_factory=list)  # (stamp ns, released chunk)
    images: dict[str, Series] = field(default_factory=dict)  # camera -> (H, W, 3) uint8 at the dataset's size
    poses: Series = field(default_factory=Series)  # (position (3,), rotation (3, 3), frame_id)
    widths: Series = field(default_factory=Series)  # metres
    joints: Series = field(default_factory=Series)  # (7,) radians, learned_layout.ARM_JOINTS order
    subtasks: dict[str, tuple[str, int]] = field(default_factory=dict)  # id -> (instruction, last state)


@dataclass
class Episode:
    subtask_id: str
    task: str
    succeeded: bool
    frames: list[dict[str, Any]]


def _topic(names: Sequence[str], suffix: str, namespace: str | None) -> str | None:
    """The bag topic for a graph-relative name: `/<namespace>/<suffix>`, or the one topic
    ending in it when no namespace is given (BagDatasetError when several do)."""
    if namespace is not None:
        wanted = "/" + "/".join(part for part in (namespace.strip("/"), suffix) if part)
        return wanted if wanted in names else None
    found = [n for n in names if n == "/" + suffix or n.endswith("/" + suffix)]
    if len(found) > 1:
        raise BagDatasetError(f"several topics end in {suffix!r} ({', '.join(found)}): pass --namespace")
    return found[0] if found else None


def read_bags(
    paths: Sequence[Path], image_size: tuple[int, int] = learned_layout.IMAGE_SIZE, namespace: str | None = None
) -> Recording:
    """Everything a dataset needs from recorder_node bags (message definitions from the bags)."""
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    out = Recording(images={camera: Series() for camera in dict.fromkeys(learned_layout.CAMERAS.values())})
    offsets: list[int] = []  # receive time - ee_pose stamp
    widths_received: list[tuple[int, float]] = []
    with AnyReader(list(paths), default_typestore=get_typestore(Stores.ROS2_KILTED)) as reader:
        names = sorted({c.topic for c in reader.connections})
        roles = {
            "chunks": "shield/chunk",
            "pose": "ee_pose",
            "width": "gripper/width",
            "joints": "joint_states",
            "plan": "planner/plan_state",
        }
        roles.update({f"camera:{camera}": f"camera/{camera}/color" for camera in out.images})
        topics = {role: _topic(names, suffix, namespace) for role, suffix in roles.items()}
        missing = [roles[r] for r, t in topics.items() if t is None and r != "plan"]
        if missing:
            raise BagDatasetError(
                f"the bag has no {', '.join(missing)} (topics: {', '.join(names) or 'none'}): record them with "
                "recorder_node.dataset_rate_hz=20 (docs/learned_policy.md, 'Recorded runs')"
            )
        role_of = {topic: role for role, topic in topics.items() if topic is not None}
        wanted = [c for c in reader.connections if c.topic in role_of]
        for connection, received_ns, raw in reader.messages(connections=wanted):
            role = role_of[connection.topic]
            msg = reader.deserialize(raw, connection.msgtype)
            if role == "width":
                widths_received.append((received_ns, float(msg.data)))
                continue
            if role == "plan":
                for state in msg.subtasks:
                    out.subtasks[state.subtask.id] = (state.subtask.instruction, int(state.state))
                continue
            stamp = nanoseconds(msg.header.stamp)
            if role == "chunks":
                out.chunks.append((stamp, chunk_from_fields(msg)))
            elif role == "pose":
                offsets.append(received_ns - stamp)
                q = msg.pose.orientation
                rotation = rotations.quat_wxyz_to_matrix(np.array([q.w, q.x, q.y, q.z]))
                p = msg.pose.position
                out.poses.add(stamp, (np.array([p.x, p.y, p.z]), rotation, msg.header.frame_id))
            elif role == "joints":
                by_name = dict(zip(msg.name, msg.position, strict=False))
                if all(j in by_name for j in learned_layout.ARM_JOINTS):
                    out.joints.add(stamp, np.array([by_name[j] for j in learned_layout.ARM_JOINTS], dtype=np.float32))
            else:
                rgb = image_from_fields(msg)
                out.images[role.split(":", 1)[1]].add(stamp, resize_image(rgb, *image_size, "stretch"))
    offset = int(np.median(offsets)) if offsets else 0
    for received_ns, width in widths_received:
        out.widths.add(received_ns - offset, width)
    out.chunks.sort(key=lambda item: item[0])
    out.poses, out.widths, out.joints = out.poses.freeze(), out.widths.freeze(), out.joints.freeze()
    out.images = {camera: series.freeze() for camera, series in out.images.items()}
    return out


def episodes_of(
    recording: Recording,
    *,
    sources: Iterable[str] = DEFAULT_SOURCES,
    max_age_s: float = 0.15,
    task: str = "",
    skipped: Counter[str] | None = None,
) -> list[Episode]:
    """The executed steps of the chunks from `sources`, as frames grouped by subtask.
    `skipped` counts the steps left out, by reason."""
    kept_sources = {SOURCES[s] for s in sources}
    skipped = skipped if skipped is not None else Counter()
    max_age = int(max_age_s * 1e9)
    chunks = recording.chunks
    steps = {round(c.dt, 9) for _, c in chunks}
    if len(steps) > 1:
        raise BagDatasetError(f"the chunks have different step durations {sorted(steps)}: one dataset needs one rate")
    episodes: list[Episode] = []
    target: tuple[np.ndarray, np.ndarray] | None = None  # the last commanded target (delta chunks add to it)
    for index, (start, chunk) in enumerate(chunks):
        until = chunks[index + 1][0] if index + 1 < len(chunks) else None
        step_ns = round(chunk.dt * 1e9)
        executed = len(chunk) if until is None else min(len(chunk), max(0, -(-(until - start) // step_ns)))
        if target is None:  # delta steps add to the last commanded target: at first, the measured pose
            pose = recording.poses.at(start, max_age)
            if pose is None and chunk.convention == Convention.DELTA:
                skipped["delta chunk before any pose"] += executed
                continue
            target = (pose[0], pose[1]) if pose is not None else (np.zeros(3), np.eye(3))  # absolute: unused
        planned = tool_targets(chunk, *target)[:executed]
        if planned:
            target = (planned[-1].position, planned[-1].rotation)
        if chunk.source not in kept_sources:
            skipped[f"{chunk.source.name.lower()} chunk"] += executed
            continue
        for k, step in enumerate(planned):
            frame = _frame(recording, start + k * step_ns, max_age, chunk.frame_id, skipped)
            if frame is None:
                continue
            frame["action"] = learned_layout.action_vector(step.position, step.rotation, step.gripper)
            if not episodes or episodes[-1].subtask_id != chunk.subtask_id:
                instruction, state = recording.subtasks.get(chunk.subtask_id, ("", -1))
                if not (instruction or task):
                    raise BagDatasetError(
                        f"no instruction for subtask {chunk.subtask_id!r} (no planner/plan_state names it): pass --task"
                    )
                episodes.append(Episode(chunk.subtask_id, task or instruction, state == SUCCEEDED, []))
            frame["task"] = episodes[-1].task
            episodes[-1].frames.append(frame)
    return episodes


def _frame(
    recording: Recording, stamp: int, max_age: int, frame_id: str, skipped: Counter[str]
) -> dict[str, Any] | None:
    """A frame's observation at `stamp` (None, counted in `skipped`, when something is stale)."""
    frame: dict[str, Any] = {}
    for key, camera in learned_layout.CAMERAS.items():
        frame[key] = recording.images[camera].at(stamp, max_age)
    pose, width, joints = (s.at(stamp, max_age) for s in (recording.poses, recording.widths, recording.joints))
    stale = [
        k for k, v in (*frame.items(), ("ee_pose", pose), ("gripper/width", width), ("joints", joints)) if v is None
    ]
    if stale:
        skipped[f"no fresh {', '.join(stale)}"] += 1
        return None
    if pose[2] != frame_id:
        raise BagDatasetError(
            f"chunks are in frame {frame_id!r} but ee_pose in {pose[2]!r}: the actions need one frame"
        )
    frame[learned_layout.STATE_KEY] = learned_layout.state_vector(RobotState(pose[0], pose[1], joints, width))
    frame[learned_layout.JOINTS_KEY] = joints
    return frame


def write_dataset(root: Path, episodes: Sequence[Episode], fps: int, image_size: tuple[int, int]) -> None:
    """The episodes as a new LeRobotDataset at `root` (needs the LeRobot extra)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from carryon_policy.core.lerobot_policy import _import_lerobot

    _import_lerobot()
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    features = learned_layout.features(image_size)
    dataset = LeRobotDataset.create(
        repo_id=REPO_ID, fps=fps, root=root, robot_type="panda", features=features, use_videos=False
    )
    for episode in episodes:
        for frame in episode.frames:
            dataset.add_frame(frame)
        dataset.save_episode()
    dataset.finalize()


def convert(
    bags: Sequence[Path],
    out: Path,
    *,
    only_succeeded: bool = False,
    task: str = "",
    sources: Sequence[str] = DEFAULT_SOURCES,
    max_age_s: float = 0.15,
    namespace: str | None = None,
    image_size: tuple[int, int] = learned_layout.IMAGE_SIZE,
) -> dict[str, Any]:
    """Bags -> a new dataset at `out` (must not exist); returns what was kept and skipped
    (also written to out/carryon_bag_dataset.json)."""
    if out.exists():
        raise FileExistsError(f"{out} exists: a dataset goes into a new folder")
    recording = read_bags(bags, image_size, namespace)
    if not recording.chunks:
        raise BagDatasetError("the bag has no released chunk on shield/chunk: nothing was executed")
    skipped: Counter[str] = Counter()
    episodes = episodes_of(recording, sources=sources, max_age_s=max_age_s, task=task, skipped=skipped)
    kept = [e for e in episodes if e.frames and (e.succeeded or not only_succeeded)]
    if not kept:
        raise BagDatasetError(f"no episode to keep ({len(episodes)} subtask(s); frames skipped: {dict(skipped)})")
    fps = round(1.0 / recording.chunks[0][1].dt)
    write_dataset(out, kept, fps, image_size)
    summary = {
        "repo_id": REPO_ID,
        "bags": [str(b) for b in bags],
        "fps": fps,
        "image_size": list(image_size),
        "sources": list(sources),
        "episodes": [
            {"subtask_id": e.subtask_id, "task": e.task, "succeeded": e.succeeded, "frames": len(e.frames)}
            for e in kept
        ],
        "left_out": [e.subtask_id for e in episodes if e not in kept],
        "frames": sum(len(e.frames) for e in kept),
        "skipped_steps": dict(skipped),
    }
    (out / "carryon_bag_dataset.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--bag", type=Path, action="append", required=True, help="a recorder_node bag (repeatable)")
    parser.add_argument("--out", type=Path, required=True, help="new folder for the dataset")
    parser.add_argument("--only-succeeded", action="store_true", help="only subtasks the plan marked succeeded")
    parser.add_argument("--task", default="", help="task text of every episode (default: the subtask's instruction)")
    parser.add_argument(
        "--source", action="append", choices=sorted(SOURCES), help=f"chunk sources kept (default {DEFAULT_SOURCES})"
    )
    parser.add_argument("--max-age", type=float, default=0.15, help="oldest observation a frame takes, s (0.15)")
    parser.add_argument("--namespace", default=None, help="the graph namespace (default: found from the topics)")
    args = parser.parse_args(argv)
    from rosbags.highlevel import AnyReaderError

    try:
        summary = convert(
            args.bag,
            args.out,
            only_succeeded=args.only_succeeded,
            task=args.task,
            sources=args.source or DEFAULT_SOURCES,
            max_age_s=args.max_age,
            namespace=args.namespace,
        )
    except (BagDatasetError, OSError, AnyReaderError) as exc:  # no bag, not one to convert, out exists
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
