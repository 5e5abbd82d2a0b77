"""recorder_node in a graph of separate processes: a Foxglove client connects to its live
server over a real WebSocket (the foxglove.sdk.v1 protocol Foxglove speaks) and receives the shield's marker
messages, decodable as visualization_msgs/MarkerArray; after the graph stops the run
folder holds a rosbag2 (MCAP) with the same topics, readable by rosbags, that
`carryon replay` plays back into ROS and carryon_policy.bag_dataset turns into LeRobot
frames, and an audit log whose hash chain verifies."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from geometry_msgs.msg import PoseStamped
from rclpy.serialization import deserialize_message
from rosbags.rosbag2 import Reader
from visualization_msgs.msg import MarkerArray
from websockets.sync.client import connect

from carryon_bringup.core.graph import GraphSpec
from carryon_bringup.graph_run import GraphRun
from carryon_common.calls import RosSession
from carryon_common.core.audit import verify
from carryon_policy.bag_dataset import episodes_of, read_bags
from carryon_policy.core import learned_layout

pytestmark = pytest.mark.graph
MARKERS = "/carryon/shield/markers"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FoxgloveClient:
    """Subscribes to one topic once advertised; keeps the payloads received for it, and
    what it saw otherwise (for the failure message)."""

    def __init__(self, port: int, topic: str) -> None:
        self.ws = connect(f"ws://127.0.0.1:{port}", subprotocols=["foxglove.sdk.v1"], open_timeout=10)
        self.topic = topic
        self.schema = ""
        self.advertised: list[str] = []
        self.frames = 0
        self.closed = ""
        self.payloads: list[bytes] = []
        self.subscribed = threading.Event()
        self.got = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for frame in self.ws:
                self.frames += 1
                if isinstance(frame, str):
                    message = json.loads(frame)
                    for channel in message.get("channels", []) if message.get("op") == "advertise" else []:
                        self.advertised.append(channel["topic"])
                        if channel["topic"] == self.topic:
                            self.schema = channel.get("schemaName", "")
                            wanted = [{"id": 7, "channelId": channel["id"]}]
                            self.ws.send(json.dumps({"op": "subscribe", "subscriptions": wanted}))
                            self.subscribed.set()
                elif frame[0] == 0x01 and struct.unpack_from("<I", frame, 1)[0] == 7:
                    self.payloads.append(bytes(frame[13:]))  # opcode, subscription id, log time, payload
                    self.got.set()
        except Exception as exc:  # noqa: BLE001 - the connection closes when the graph stops
            self.closed = repr(exc)

    def report(self, run_dir: Path) -> str:
        log = run_dir / "logs" / "recorder_node.log"
        tail = log.read_text(errors="replace").splitlines()[-30:] if log.exists() else ["(no recorder log)"]
        return (
            f"{self.frames} frames, advertised {sorted(set(self.advertised))}, subscribed {self.subscribed.is_set()}, "
            f"closed: {self.closed or 'no'}; recorder log:\n" + "\n".join(tail)
        )

    def close(self) -> None:
        self.ws.close()


def dataset_frames(bag: Path) -> None:
    """recorder_node.dataset_rate_hz: the bag holds what carryon_policy.bag_dataset makes
    LeRobot frames of, the cameras kept often enough that most executed steps have a fresh
    image (at the default 1 Hz, scene camera only, none would)."""
    recording = read_bags([bag])
    skipped: Counter[str] = Counter()
    episodes = episodes_of(recording, task="open the pink cover", skipped=skipped)
    assert [e.subtask_id for e in episodes] == ["cli"], (episodes, skipped)
    frames = episodes[0].frames
    assert len(frames) >= 16 and len(frames) >= 3 * sum(skipped.values()), (len(frames), skipped)
    released = np.concatenate([c.positions for _, c in recording.chunks])
    for frame in frames:  # each action a step the shield released (float32 in the frame)
        assert np.min(np.linalg.norm(released - frame["action"][:3], axis=1)) < 1e-5
        for key in learned_layout.CAMERAS:
            assert frame[key].shape == (*learned_layout.IMAGE_SIZE, 3) and frame[key].std() > 1.0  # a real image
        state = frame[learned_layout.STATE_KEY]
        assert 0.2 < state[2] < 1.0 and 0.0 <= state[9] <= 1.0  # the tool above the table; gripper closedness
        assert np.all(np.isfinite(frame[learned_layout.JOINTS_KEY]))


def test_foxglove_clients_receive_markers_and_the_run_is_bagged(config_dir: Path, tmp_path: Path) -> None:
    spec = GraphSpec.load(config_dir)
    port = free_port()
    only = ["sim_node", "perception_node", "shield_node", "policy_node", "recorder_node"]
    run_dir = tmp_path / "run"
    sets = ["--set", f"recorder_node.foxglove_port={port}", "--set", "recorder_node.dataset_rate_hz=20"]
    with GraphRun(spec, run_dir, only=only, extra_args=sets) as graph:
        graph.wait_ready(timeout_s=90.0)
        client = FoxgloveClient(port, MARKERS)
        try:
            # The recorder advertises a topic once discovery has shown it a publisher (the shield's).
            assert client.subscribed.wait(60.0), client.report(run_dir)
            cli = [sys.executable, "-m", "carryon_bringup.cli", "--config-dir", str(config_dir), "policy", "run"]
            for _ in range(3):  # the recorder finds the topic within a second; chunks make markers
                run = [*cli, "open the pink cover", "--target", "pink_cover", "--steps", "24"]
                done = subprocess.run(run, env=graph.env, capture_output=True, text=True, timeout=120, check=False)
                assert done.returncode == 0, done.stderr
                if client.got.wait(10.0):
                    break
            assert client.payloads, "no marker message reached the Foxglove client: " + client.report(run_dir)
        finally:
            client.close()
    assert client.schema == "visualization_msgs/msg/MarkerArray"
    markers = deserialize_message(client.payloads[0], MarkerArray)
    assert markers.markers and markers.markers[0].header.frame_id == "world"
    with Reader(run_dir / "bag") as bag:
        counts = {c.topic: c.msgcount for c in bag.connections}
    assert counts.get(MARKERS, 0) >= 1 and counts.get("/carryon/shield/events", 0) >= 1, counts
    assert counts.get("/carryon/ee_pose", 0) > 10, counts
    dataset_frames(run_dir / "bag")
    check = verify(run_dir / "audit.jsonl")
    assert check.ok and check.entries >= 1, check.problem  # at least the e-stop state (released)

    # The bag plays back into ROS (what rviz shows) under another namespace.
    received: list[PoseStamped] = []
    with RosSession("replay_probe", domain_id=graph.domain_id) as session:
        session.node.create_subscription(PoseStamped, "/replay/carryon/ee_pose", received.append, 100)
        cli = [sys.executable, "-m", "carryon_bringup.cli", "replay", str(run_dir / "bag"), "--rate", "20",
               "--prefix", "/replay", "--topic", "/carryon/ee_pose"]  # fmt: skip
        player = subprocess.Popen(cli, env=graph.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        while player.poll() is None:
            session.executor.spin_once(timeout_sec=0.05)
        for _ in range(20):
            session.executor.spin_once(timeout_sec=0.05)
        output = player.stdout.read() if player.stdout else ""
    assert player.returncode == 0 and "replayed" in output, output
    assert len(received) >= 0.8 * counts["/carryon/ee_pose"], (len(received), counts["/carryon/ee_pose"])
