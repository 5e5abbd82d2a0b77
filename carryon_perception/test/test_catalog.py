"""The object catalog without a simulator: descriptor, files, joint labelling, photos."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from carryon_common.core.errors import ConfigError, UnknownNameError
from carryon_perception.core.appearance import DESCRIPTOR_LENGTH, colour_cost, comparable, photo_region
from carryon_perception.core.catalog import Appearance, Catalog, CatalogEntry, describe

RED, GREEN, BLUE, PINK = (180, 40, 40), (50, 150, 75), (50, 125, 230), (255, 128, 190)
WHITE, DARK_GREY = (235, 235, 228), (64, 64, 76)
TABLE_Z = 0.42


def shaded(rgb: tuple[int, int, int], n: int = 400, lo: float = 0.25, seed: int = 0) -> np.ndarray:
    """n pixels of one surface colour under shading factors lo..1 (clipped to 255)."""
    shade = np.random.default_rng(seed).uniform(lo, 1.0, n)
    return np.clip(np.asarray(rgb, float)[None, :] * shade[:, None], 0, 255).astype(np.uint8)


def box_points(half_x: float, half_y: float, height: float, yaw: float = 0.0, n: int = 2000) -> np.ndarray:
    """Points on the top and sides of a box standing on the table, metres, world."""
    rng = np.random.default_rng(1)
    local = rng.uniform([-half_x, -half_y, 0.0], [half_x, half_y, height], (n, 3))
    local[: n // 2, 2] = height
    c, s = np.cos(yaw), np.sin(yaw)
    out = local @ np.array([[c, s, 0], [-s, c, 0], [0, 0, 1]])
    return out + np.array([0.5, 0.0, TABLE_Z])


def view(rgb: tuple[int, int, int], height: float, footprint: float, *, partial: bool = False, seed: int = 0):
    pts = box_points(footprint / 2 / np.sqrt(2), footprint / 2 / np.sqrt(2), height)
    return describe(shaded(rgb, seed=seed), pts, TABLE_Z, partial=partial)


def entry(name: str, rgb: tuple[int, int, int], height: float, footprint: float, kind: str = "") -> CatalogEntry:
    refs = tuple(view(rgb, height, footprint, seed=s) for s in range(3))
    return CatalogEntry(name, kind or name, refs, height, footprint)


@pytest.fixture
def catalog() -> Catalog:
    entries = [
        entry("meat", RED, 0.03, 0.08),
        entry("bottle", GREEN, 0.2, 0.06),
        entry("cube", BLUE, 0.04, 0.055),
        entry("bowl", WHITE, 0.045, 0.14),
        entry("obstacle_1", DARK_GREY, 0.12, 0.085, "block"),
        entry("obstacle_3", DARK_GREY, 0.12, 0.085, "block"),
    ]
    return Catalog({e.name: e for e in entries})


# -- descriptor ---------------------------------------------------------------------------
def test_descriptor_ignores_shading_but_separates_hues() -> None:
    bright, dark = (comparable(describe(shaded(GREEN, lo=lo), np.empty((0, 3)), 0).histogram) for lo in (0.9, 0.1))
    red = comparable(describe(shaded(RED), np.empty((0, 3)), 0).histogram)
    shading, _ = colour_cost(bright[None], dark[None], 0.02)
    hue, _ = colour_cost(bright[None], red[None], 0.02)
    assert shading[0] < 0.15 < 0.8 < hue[0]


def test_descriptor_tells_white_from_dark_grey_and_sums_to_one() -> None:
    white, grey = (describe(shaded(c, lo=0.8), np.empty((0, 3)), 0) for c in (WHITE, DARK_GREY))
    assert len(white.histogram) == DESCRIPTOR_LENGTH
    assert sum(white.histogram) == pytest.approx(1.0, abs=1e-3)
    cost, _ = colour_cost(comparable(white.histogram)[None], comparable(grey.histogram)[None], 0.02)
    assert cost[0] > 0.6


@pytest.mark.parametrize("yaw", [0.0, 0.4, np.pi / 4])
def test_sizes_are_height_above_support_and_yaw_free_width(yaw: float) -> None:
    a = describe(shaded(RED, 2000), box_points(0.03, 0.03, 0.12, yaw), TABLE_Z)
    assert a.height_m == pytest.approx(0.12, abs=0.002)
    assert a.footprint_m == pytest.approx(0.06 * np.sqrt(2), rel=0.05)  # the diagonal, at any yaw
    assert a.pixels == 2000


def test_describe_without_depth_has_colour_only_and_needs_pixels() -> None:
    a = describe(shaded(RED), np.empty((0, 3)), TABLE_Z)
    assert a.height_m is None and a.footprint_m is None
    with pytest.raises(ValueError, match="at least one pixel"):
        describe(np.empty((0, 3), np.uint8), np.empty((0, 3)), TABLE_Z)


# -- files --------------------------------------------------------------------------------
def test_yaml_round_trip(catalog: Catalog, tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    catalog.save(path, header="made by a test\nsecond line")
    text = path.read_text()
    assert text.startswith("# made by a test\n# second line\n")
    assert text.count("block:") == 1  # a type's references are stored once
    assert Catalog.load(path) == catalog


def _write(tmp_path: Path, catalog: Catalog, edit: tuple[str, str]) -> Path:
    path = tmp_path / "catalog.yaml"
    catalog.save(path)
    path.write_text(path.read_text().replace(*edit, 1))
    return path


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("  meat: meat", "  meat: meet"), r"objects\.meat: unknown type 'meet'.*did you mean 'meat'"),
        (("histogram: [", "histogram: [0.5, "), r"types\.block\.references\.0\.histogram: List should have at most 40"),
        (("height_m: 0.12", "height_m: -0.12"), r"types\.block\.height_m: Input should be greater than or equal to 0"),
        (("descriptor: hs12x3+v4", "descriptor: hs8x2+v4"), r"descriptor: String should match pattern"),
        (("objects:", "object:"), r"object: unknown parameter"),
    ],
)
def test_bad_file_names_file_and_field(catalog: Catalog, tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    path = _write(tmp_path, catalog, edit)
    with pytest.raises(ConfigError, match=rf"{path}: .*{message}"):
        Catalog.load(path)


def test_yaml_syntax_error_names_line(catalog: Catalog, tmp_path: Path) -> None:
    path = _write(tmp_path, catalog, ("objects:", "objects: ["))
    with pytest.raises(ConfigError, match=rf"{path}:\d+:\d+: invalid YAML"):
        Catalog.load(path)


def test_entries_of_one_type_must_look_the_same(catalog: Catalog) -> None:
    odd = entry("obstacle_3", GREEN, 0.12, 0.085, "block")
    with pytest.raises(ValueError, match="share type 'block' but differ"):
        Catalog({**catalog.entries, "obstacle_3": odd})


# -- labelling ----------------------------------------------------------------------------
def test_each_segment_gets_its_object(catalog: Catalog) -> None:
    segments = [view(BLUE, 0.04, 0.055, seed=9), view(RED, 0.03, 0.08, seed=9), view(GREEN, 0.2, 0.06, seed=9)]
    matches = catalog.label(segments)
    assert [m.label for m in matches] == ["cube", "meat", "bottle"]
    assert all(0.5 < m.score <= 1.0 and m.cost < 0.25 for m in matches)


def test_an_entry_labels_at_most_one_segment(catalog: Catalog) -> None:
    close, closer = view(RED, 0.03, 0.07, seed=5), view(RED, 0.03, 0.08, seed=6)
    matches = catalog.label([close, closer, view(GREEN, 0.2, 0.06)])
    labels = [m.label for m in matches]
    assert labels.count("meat") == 1 and labels[2] == "bottle"
    assert None in labels[:2]  # the other red segment matches nothing else: unknown


def test_identical_objects_each_get_one_of_their_names(catalog: Catalog) -> None:
    blocks = [view(DARK_GREY, 0.12, 0.085, seed=s) for s in (7, 8)]
    assert sorted(str(m.label) for m in catalog.label(blocks)) == ["obstacle_1", "obstacle_3"]


def test_above_the_threshold_a_segment_stays_unknown(catalog: Catalog) -> None:
    (match,) = catalog.label([view(PINK, 0.09, 0.12)])
    assert match.label is None and match.score == 0.0 and match.cost > 0.5
    assert catalog.label([]) == []
    (none,) = catalog.label([view(RED, 0.03, 0.08)], candidates=[])
    assert none.label is None and none.cost == np.inf


def test_a_much_larger_segment_is_not_the_entry_but_a_smaller_one_is(catalog: Catalog) -> None:
    """Occlusion makes segments smaller, never larger: a red segment twice the meat's size is
    not the meat; one a third of its size (partly hidden) still is."""
    (large,) = catalog.label([view(RED, 0.06, 0.17)])
    (small,) = catalog.label([view(RED, 0.015, 0.03)])
    assert large.label is None
    assert small.label == "meat"


def test_size_picks_between_objects_of_one_colour() -> None:
    white = [entry("plate", WHITE, 0.01, 0.18), entry("bowl", WHITE, 0.045, 0.14), entry("towel", WHITE, 0.05, 0.07)]
    catalog = Catalog({e.name: e for e in white})
    segments = [view(WHITE, 0.05, 0.07, seed=3), view(WHITE, 0.01, 0.18, seed=4), view(WHITE, 0.045, 0.14, seed=5)]
    assert [m.label for m in catalog.label(segments)] == ["towel", "plate", "bowl"]


def test_a_partial_view_may_show_only_some_of_an_objects_colours() -> None:
    """A two-tone object seen only in part (cut by the image border) shows one tone: it
    matches when the segmenter marks it partial, and not as a whole view."""
    two_tone = np.concatenate([shaded(GREEN, 300), shaded(WHITE, 300)])
    refs = (describe(two_tone, box_points(0.04, 0.04, 0.2), TABLE_Z),)
    catalog = Catalog({"bottle": CatalogEntry("bottle", "bottle", refs, 0.2, 0.11)})
    fragment = box_points(0.02, 0.02, 0.06)
    (whole,) = catalog.label([describe(shaded(GREEN), fragment, TABLE_Z)])
    (partial,) = catalog.label([describe(shaded(GREEN), fragment, TABLE_Z, partial=True)])
    assert whole.label is None
    assert partial.label == "bottle"


def test_candidates_restrict_the_names(catalog: Catalog) -> None:
    (match,) = catalog.label([view(RED, 0.03, 0.08)], candidates=["bottle", "cube"])
    assert match.label is None
    with pytest.raises(UnknownNameError, match=r"unknown catalog entry 'meet'.*did you mean 'meat'"):
        catalog.label([view(RED, 0.03, 0.08)], candidates=["meet"])


# -- reference photos -----------------------------------------------------------------------
def photo(rgb: tuple[int, int, int], background: tuple[int, int, int], size: int = 240) -> np.ndarray:
    """A photo: an object (a shaded disc of `rgb`, a third of the frame) on a textured background."""
    rng = np.random.default_rng(2)
    image = np.clip(np.asarray(background, float) * rng.uniform(0.8, 1.1, (size, size, 1)), 0, 255)
    rows, cols = np.mgrid[0:size, 0:size]
    r = np.hypot(rows - size * 0.55, cols - size * 0.45)
    disc = r < size / 6
    image[disc] = np.asarray(rgb, float) * (1.0 - 0.5 * r[disc, None] / (size / 6))
    return image.astype(np.uint8)


def test_photo_region_keeps_the_object_not_the_background() -> None:
    colours = photo_region(photo(GREEN, (150, 110, 75)))
    assert len(colours) > 500
    assert np.mean(colours[:, 1] > colours[:, 0]) > 0.95  # green, not the brown table
    white = photo_region(photo(WHITE, (40, 40, 40)))
    assert np.mean(white.min(axis=1) > 100) > 0.95  # a white object on a dark background
    with pytest.raises(ValueError, match="rgb image"):
        photo_region(np.zeros((10, 10), np.uint8))


def test_photos_add_colour_references_to_an_entity_and_its_type(catalog: Catalog) -> None:
    images = [photo(DARK_GREY, (150, 110, 75)), photo(DARK_GREY, (200, 200, 200))]
    out = catalog.with_reference_images("obstacle_1", images)
    assert len(out.entries["obstacle_1"].references) == 5
    assert out.entries["obstacle_3"] == CatalogEntry(**{**out.entries["obstacle_1"].__dict__, "name": "obstacle_3"})
    assert out.entries["obstacle_1"].references[-1].height_m is None  # a photo has no size
    assert out.entries["meat"] == catalog.entries["meat"] and len(catalog.entries["obstacle_1"].references) == 3


def test_a_photo_of_a_new_entity_makes_it_recognisable(catalog: Catalog, tmp_path: Path) -> None:
    (before,) = catalog.label([view(PINK, 0.09, 0.12)])
    out = catalog.with_reference_images("pink_cover", [photo(PINK, (150, 110, 75))])
    (after,) = out.label([view(PINK, 0.09, 0.12)])
    assert before.label is None and after.label == "pink_cover"
    new = out.entries["pink_cover"]
    assert (new.type, new.height_m, new.footprint_m) == ("pink_cover", None, None)
    out.save(tmp_path / "c.yaml")
    assert Catalog.load(tmp_path / "c.yaml") == out


def test_a_new_entity_never_joins_an_existing_type(catalog: Catalog) -> None:
    out = catalog.with_reference_images("block", [photo(PINK, (150, 110, 75))])
    assert out.entries["block"].type == "block_photo"
    assert out.entries["obstacle_1"] == catalog.entries["obstacle_1"]


def test_appearance_checks_its_histogram_length() -> None:
    with pytest.raises(ValueError, match="expected 40"):
        Appearance((1.0, 0.0))
