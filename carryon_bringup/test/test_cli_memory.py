"""`carryon memory show|set|remember-image|history|restore` against a memory_node
(in-process, real DDS)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rclpy.parameter import Parameter

from carryon_bringup.cli import common
from carryon_bringup.cli.main import main
from carryon_memory.node import MemoryNode


@pytest.fixture
def memory_node(ros, tmp_path: Path) -> MemoryNode:  # type: ignore[no-untyped-def]
    overrides = [Parameter("memory_dir", value=str(tmp_path / "memory")), Parameter("rescan_period_s", value=0.0)]
    return ros.add(MemoryNode(namespace="carryon", context=ros.context, parameter_overrides=overrides))  # type: ignore[no-any-return]


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common.console, "width", 200)  # history rows on one line each


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["memory", *args, "--timeout", "10"])
    out, err = capsys.readouterr()
    return code, out, err


def test_set_show_history_restore(memory_node: MemoryNode, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "set", "--user", "alice", "diet", "preference", "vegetarian")
    assert code == common.EXIT_OK and "1 change to users/alice.md, version 1" in out
    code, out, _ = run(capsys, "set", "--user", "alice", "diet", "preference", "non-vegetarian", "--source", "me")
    assert code == common.EXIT_OK

    code, out, err = run(capsys, "show", "--user", "alice")
    assert code == common.EXIT_OK
    assert out.startswith("## User memory: alice\n### diet\n- preference: non-vegetarian\n")
    assert f"rendered {len(out)} chars, ~{-(-len(out) // 4)} tokens (chars/4)" in err

    code, out, _ = run(capsys, "history", "--file", "users/alice.md")
    assert code == common.EXIT_OK
    assert "vegetarian -> non-vegetarian" in out and "operator:cli" in out and "2 changes shown" in out

    code, out, _ = run(capsys, "restore", "1")
    assert code == common.EXIT_OK and "restored version 1 (users/alice.md)" in out
    code, out, _ = run(capsys, "show", "--user", "alice")
    assert "- preference: vegetarian\n" in out

    code, out, _ = run(capsys, "set", "--user", "alice", "diet", "preference", "")  # removes
    assert code == common.EXIT_OK
    assert "preference" not in (memory_node.memory_dir / "users/alice.md").read_text()


def test_failures_have_the_documented_exit_codes(memory_node: MemoryNode, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "set", "--user", "../root", "diet", "preference", "x")
    assert code == common.EXIT_FAILED and "invalid argument" in err and "user id" in err
    code, _, err = run(capsys, "restore", "7")
    assert code == common.EXIT_FAILED and "not found" in err and "version 7 does not exist" in err
    code, _, err = run(capsys, "restore", "0")
    assert code == common.EXIT_USAGE
    with pytest.raises(SystemExit) as caught:  # there is no such thing as a temporary fact in memory
        main(["memory", "set", "--user", "alice", "--temporary", "drink", "wish", "tea"])
    assert caught.value.code == common.EXIT_USAGE


def test_remember_image_stores_a_reference_image(
    memory_node: MemoryNode, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import io

    from PIL import Image

    photo = tmp_path / "my_mug.png"
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (20, 90, 200)).save(buffer, format="PNG")
    photo.write_bytes(buffer.getvalue())
    code, out, _ = run(capsys, "remember-image", "--user", "alice", "mug", str(photo))
    assert code == common.EXIT_OK, out
    code, out, _ = run(capsys, "show", "--user", "alice")
    assert "### mug" in out and "- reference_image: images/" in out
    code, _, err = run(capsys, "remember-image", "--user", "alice", "mug", str(tmp_path / "notes.txt"))
    assert code == common.EXIT_USAGE and "not a .png / .jpg file" in err
    (tmp_path / "fake.png").write_bytes(b"not an image")
    code, _, err = run(capsys, "remember-image", "--user", "alice", "mug", str(tmp_path / "fake.png"))
    assert code == common.EXIT_FAILED and "invalid argument" in err
