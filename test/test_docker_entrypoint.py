"""docker/entrypoint.sh as a script: it sources ROS 2, then the workspace, then runs the
command with its exit code, and says what is wrong outside the image."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENTRYPOINT = REPO / "docker" / "entrypoint.sh"


def run(tmp_path: Path, *command: str, ros: str | None = "export FROM_ROS=jazzy\n") -> subprocess.CompletedProcess[str]:
    ros_setup, ws_setup = tmp_path / "ros_setup.bash", tmp_path / "ws_setup.bash"
    if ros is not None:
        ros_setup.write_text(ros)
    ws_setup.write_text('export FROM_WS="after ${FROM_ROS:-nothing}"\n')  # sees what ROS's setup set
    env = {**os.environ, "CARRYON_ROS_SETUP": str(ros_setup), "CARRYON_WS_SETUP": str(ws_setup)}
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
    assert 'ENTRYPOINT ["/entrypoint.sh"]' in dockerfile and "COPY docker/entrypoint.sh /entrypoint.sh" in dockerfile
    assert os.access(ENTRYPOINT, os.X_OK)
