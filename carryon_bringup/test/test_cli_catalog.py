"""`carryon catalog list|add`: objects from photos into a perception catalog file, which then
labels a segment of that look; bad photos and sizes are refused and change nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from carryon_bringup.cli import common
from carryon_bringup.cli.main import main
from carryon_perception.core.appearance import describe
from carryon_perception.core.catalog import Catalog

CONFIG = Path(__file__).resolve().parents[2] / "config"


def photo(path: Path, rgb: tuple[int, int, int]) -> Path:
    """An object of colour `rgb` in the middle of a light grey background."""
    image = np.full((120, 160, 3), 215, dtype=np.uint8)
    image[35:85, 50:110] = rgb
    image[35:85, 50:110] += np.random.default_rng(0).integers(0, 12, (50, 60, 3), dtype=np.uint8)  # some texture
    Image.fromarray(image).save(path)
    return path


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.yaml"
    shutil.copy(CONFIG / "perception" / "catalog_robot.yaml", path)
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["catalog", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_add_from_photos_then_the_catalog_labels_that_look(
    catalog: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "list", "--catalog", str(catalog))
    assert code == common.EXIT_OK and "no objects" in out
    red, blue = photo(tmp_path / "red.png", (200, 30, 30)), photo(tmp_path / "blue.png", (30, 40, 190))
    code, out, err = run(capsys, "add", "red_mug", str(red), "--height-m", "0.1", "--catalog", str(catalog))
    assert code == common.EXIT_OK, err
    assert "red_mug (type red_mug) +1 reference(s), 1 in all" in out
    code, _, err = run(capsys, "add", "blue_box", str(blue), "--catalog", str(catalog))
    assert code == common.EXIT_OK, err
    code, out, _ = run(capsys, "list", "--catalog", str(catalog))
    assert "red_mug: type red_mug, 1 reference(s), height 0.100 m" in out and "blue_box: type blue_box" in out

    loaded = Catalog.load(catalog)
    rng = np.random.default_rng(1)
    seen = np.clip(np.array([195, 35, 35]) + rng.integers(-8, 8, (400, 3)), 0, 255).astype(np.uint8)
    points = np.column_stack([rng.uniform(0.5, 0.55, 300), rng.uniform(0, 0.05, 300), rng.uniform(0.0, 0.1, 300)])
    [match] = loaded.label([describe(seen, points, 0.0)])
    assert match.label == "red_mug", match


def test_a_bad_photo_or_size_is_refused_and_changes_nothing(
    catalog: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = catalog.read_bytes()
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a png")
    code, _, err = run(capsys, "add", "mug", str(broken), "--catalog", str(catalog))
    assert code == common.EXIT_USAGE and "not a readable image" in err
    code, _, err = run(capsys, "add", "mug", str(photo(tmp_path / "m.png", (0, 200, 0))), "--height-m", "-1",
                       "--catalog", str(catalog))  # fmt: skip
    assert code == common.EXIT_USAGE and "--height-m" in err
    code, _, err = run(capsys, "list", "--catalog", str(tmp_path / "missing.yaml"))
    assert code == common.EXIT_USAGE and "missing.yaml" in err
    assert catalog.read_bytes() == before
