"""Every camera image sim_node renders reaches a subscriber in another process.

One camera instant is ~0.7 MB (RGB + depth + masks). With Fast DDS's default 512 KiB
shared-memory segment about half the depth images were overwritten before a subscriber
read them, and the shield failed closed on "depth is 0.8 s old" again and again; the
project's transport profile (config/dds/fastdds.xml, set by env.sh) fixes that.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image

from carryon_bringup.core.graph import GraphSpec
from carryon_bringup.graph_run import GraphRun
from carryon_common.calls import RosSession

pytestmark = pytest.mark.graph

STREAMS = [
    *(f"camera/{camera}/{stream}" for camera in ("scene", "wrist") for stream in ("color", "depth")),
    *(f"sim/camera/{camera}/segmentation" for camera in ("scene", "wrist")),  # the truth masks (evaluation only)
]


def test_every_rendered_image_arrives_in_another_process(config_dir: Path, tmp_path: Path) -> None:
    assert os.environ.get("FASTDDS_DEFAULT_PROFILES_FILE", "").endswith("fastdds.xml"), "source env.sh"
    spec = GraphSpec.load(config_dir)
    stamps: dict[str, list[float]] = {stream: [] for stream in STREAMS}
    with GraphRun(spec, tmp_path / "run", only=["sim_node"]) as graph:
        graph.wait_ready(timeout_s=90.0)
        with RosSession("camera_probe", domain_id=graph.domain_id) as session:
            for stream in STREAMS:

                def keep(msg: Image, stream: str = stream) -> None:
                    stamps[stream].append(msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9)

                session.node.create_subscription(Image, f"/{spec.namespace}/{stream}", keep, qos_profile_sensor_data)
            # Enough images to judge delivery; on a loaded machine simulated time runs slower
            # than the wall clock (sim_node waits rather than races), so allow up to 30 s.
            deadline = time.monotonic() + 30.0
            while time.monotonic() < deadline and min(len(seen) for seen in stamps.values()) < 40:
                session.executor.spin_once(timeout_sec=0.05)
    for stream, seen in stamps.items():
        assert len(seen) > 20, f"{stream}: only {len(seen)} images"
        seen_s = np.array(seen[2:])  # the first ones may predate the subscription's match
        expected = round((seen_s[-1] - seen_s[0]) * 10.0) + 1  # camera_rate_hz 10
        gaps = np.diff(seen_s)
        assert len(seen_s) >= 0.95 * expected, f"{stream}: {len(seen_s)} of {expected} images arrived"
        assert gaps.max() < 0.25, f"{stream}: {gaps.max():.2f} s without an image"
