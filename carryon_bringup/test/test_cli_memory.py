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


# -- a read-only file and `carryon memory repair` ------------------------------------------
BROKEN = b"# User memory: bob\n\n## snack #\n- preference: chips\n\n## snack #\n- preference: crisps\nprose\n"


def test_a_read_only_file_names_its_problem_and_repair_makes_it_writable_with_the_node_running(
    memory_node: MemoryNode, capsys: pytest.CaptureFixture[str]
) -> None:
    path = memory_node.memory_dir / "users/bob.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(BROKEN)
    code, _, err = run(capsys, "set", "--user", "bob", "diet", "preference", "vegan")
    assert code == common.EXIT_FAILED and "read-only" in err
    assert "users/bob.md:6: duplicate section 'snack'" in err and "users/bob.md:8: expected" in err
    assert "carryon memory repair --user bob" in err
    code, out, err = run(capsys, "show", "--user", "bob")
    assert code == common.EXIT_OK and "carryon memory repair --all" in err

    memory_dir = str(memory_node.memory_dir)
    code, out, _ = run(capsys, "repair", "--user", "bob", "--dry-run", "--memory-dir", memory_dir)
    assert code == common.EXIT_OK and path.read_bytes() == BROKEN
    assert "users/bob.md:6: merged:" in out and "+- preference: crisps" in out and "nothing was written" in out

    code, out, _ = run(capsys, "repair", "--user", "bob", "--memory-dir", memory_dir)  # while the node runs
    assert code == common.EXIT_OK and "repaired 1 file(s) (version 1)" in out
    assert "users/bob.md:4: superseded: snack.preference was 'chips'" in out
    code, out, _ = run(capsys, "set", "--user", "bob", "diet", "preference", "vegan")  # through the node
    assert code == common.EXIT_OK, out
    code, out, _ = run(capsys, "show", "--user", "bob")
    assert "### snack\n- preference: crisps\n" in out and "- preference: vegan\n" in out
    code, out, _ = run(capsys, "history", "--file", "users/bob.md")
    assert "2 changes shown" in out and "repair" in out


def test_repair_finds_the_memory_folder_from_the_config_and_says_how_to_undo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, config_dir: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # memory_node.memory_dir is `memory`, relative to the working directory
    code, _, err = run(capsys, "repair", "--all", "--config-dir", str(config_dir))
    assert code == common.EXIT_USAGE and "does not exist" in err
    from carryon_memory.core.store import MemoryStore
    from carryon_memory.core.types import Fact

    store = MemoryStore(tmp_path / "memory")
    store.update_user("bob", [Fact("diet", "preference", "vegan")], "op", 1.0)
    (tmp_path / "memory/users/bob.md").write_bytes(BROKEN)
    (tmp_path / "memory/scene.md").write_bytes(b"## counter\n- observed: yesterday\n")
    code, out, _ = run(capsys, "repair", "--all", "--config-dir", str(config_dir))
    assert code == common.EXIT_OK and f"memory folder {tmp_path / 'memory'}" in out
    assert "repaired 2 file(s) (versions 3-4; before them, users/bob.md as found (edited by hand)" in out
    assert "`carryon memory restore 2` undoes the repair" in out
    assert store.problems() == []
    code, out, _ = run(capsys, "repair", "--all", "--config-dir", str(config_dir))
    assert code == common.EXIT_OK and "nothing to repair" in out
    with pytest.raises(SystemExit) as caught:  # one of --user, --scene, --all
        main(["memory", "repair"])
    assert caught.value.code == common.EXIT_USAGE
