"""docker/entrypoint.sh as a script: it sources ROS 2, then the workspace, then runs the
command with its exit code, and says what is wrong outside the image."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENTRYPOINT = REPO / "docker" / "entrypoint.sh"


def run(
    tmp_path: Path, *command: str, ros: str | None = "export FROM_ROS=jazzy\n", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    ros_setup, ws_setup = tmp_path / "ros_setup.bash", tmp_path / "ws_setup.bash"
    if ros is not None:
        ros_setup.write_text(ros)
    ws_setup.write_text('export FROM_WS="after ${FROM_ROS:-nothing}"\n')  # sees what ROS's setup set
    env = {**os.environ, **(env or {}), "CARRYON_ROS_SETUP": str(ros_setup), "CARRYON_WS_SETUP": str(ws_setup)}
    command_line = ["bash", str(ENTRYPOINT), *command]
    return subprocess.run(command_line, env=env, capture_output=True, text=True, timeout=30, check=False)


def test_sources_ros_then_the_workspace_and_runs_the_command(tmp_path: Path) -> None:
    done = run(tmp_path, "bash", "-c", 'echo "$FROM_ROS / $FROM_WS"; exit 7')
    assert done.stdout.strip() == "jazzy / after jazzy", done.stderr
    assert done.returncode == 7  # the command's own exit code (exec)


def test_outside_the_image_it_says_which_file_is_missing(tmp_path: Path) -> None:
    done = run(tmp_path, "true", ros=None)
    assert done.returncode == 2
    assert f"entrypoint: {tmp_path / 'ros_setup.bash'} not found" in done.stderr


def test_the_dockerfile_uses_it_as_its_entrypoint() -> None:
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    assert (
        'ENTRYPOINT ["/entrypoint.sh"]' in dockerfile
        and "COPY docker/entrypoint.sh docker/dds_interface.py /" in dockerfile
    )
    # DDS stays on the robot PC unless an interface is named; the keys live on a volume (issue 43).
    assert "ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST" in dockerfile and "SUBNET" not in dockerfile
    assert "CARRYON_KEYS_DIR=/keys" in dockerfile
    assert os.access(ENTRYPOINT, os.X_OK)


def test_a_named_interface_limits_dds_to_its_address(tmp_path: Path) -> None:
    profile = REPO / "config" / "dds" / "fastdds.xml"
    out = tmp_path / "fastdds.xml"
    env = {
        "CARRYON_DDS_INTERFACE": "lo",
        "FASTDDS_DEFAULT_PROFILES_FILE": str(profile),
        "CARRYON_DDS_PROFILE_OUT": str(out),
    }
    done = run(tmp_path, "bash", "-c", 'echo "$FASTDDS_DEFAULT_PROFILES_FILE $ROS_AUTOMATIC_DISCOVERY_RANGE"', env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(out), "SUBNET"]
    text = out.read_text()
    assert "<interfaceWhiteList><address>127.0.0.1</address></interfaceWhiteList>" in text
    assert "<segment_size>16777216</segment_size>" in text  # the rest of the profile is kept


def test_an_interface_that_does_not_exist_stops_the_container(tmp_path: Path) -> None:
    profile = REPO / "config" / "dds" / "fastdds.xml"
    env = {"CARRYON_DDS_INTERFACE": "nosuch0", "FASTDDS_DEFAULT_PROFILES_FILE": str(profile),
           "CARRYON_DDS_PROFILE_OUT": str(tmp_path / "out.xml")}  # fmt: skip
    done = run(tmp_path, "true", env=env)
    assert done.returncode == 2 and "CARRYON_DDS_INTERFACE=nosuch0: no IPv4 address" in done.stderr
