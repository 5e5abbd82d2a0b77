"""Reference images from user memory in the catalog, without ROS: decoding, which memory
changes matter, the catalog and labeller built with them."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from carryon_perception.core.build import CatalogLabeller
from carryon_perception.core.catalog import Catalog, CatalogEntry, describe
from carryon_perception.core.references import (
    ReferenceImage,
    add_references,
    concerns_reference_images,
    decode_image,
    labeller_with_references,
)
from carryon_perception.core.segment import Segment

PINK, WHITE, BROWN = (255, 128, 190), (235, 235, 228), (150, 110, 75)
TABLE_Z = 0.42


def photo(rgb: tuple[int, int, int], background: tuple[int, int, int] = BROWN, size: int = 120) -> np.ndarray:
    """A photo: a shaded disc of `rgb` in the middle of a textured background."""
    rng = np.random.default_rng(2)
    image = np.clip(np.asarray(background, float) * rng.uniform(0.8, 1.1, (size, size, 1)), 0, 255)
    rows, cols = np.mgrid[0:size, 0:size]
    r = np.hypot(rows - size / 2, cols - size / 2)
    disc = r < size / 6
    image[disc] = np.asarray(rgb, float) * (1.0 - 0.4 * r[disc, None] / (size / 6))
    return image.astype(np.uint8)


def encode(pixels: np.ndarray, fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return buffer.getvalue()


def ref(entity: str, data: bytes, fmt: str = "png", user: str = "alice", key: str = "image") -> ReferenceImage:
    return ReferenceImage(user, entity, key, f"images/{user}/{entity}-{key}.{fmt}", fmt, data)


def segment(rgb: tuple[int, int, int], height: float = 0.09, footprint: float = 0.12, n: int = 600) -> Segment:
    """A segment of `rgb` (shaded) standing on the table: its pixels, points and colours."""
    rng = np.random.default_rng(1)
    half = footprint / 2 / np.sqrt(2)
    points = rng.uniform([-half, -half, 0.0], [half, half, height], (n, 3)) + np.array([0.5, 0.0, TABLE_Z])
    points[: n // 2, 2] = TABLE_Z + height
    colors = np.clip(np.asarray(rgb, float) * rng.uniform(0.6, 1.0, (n, 1)), 0, 255).astype(np.uint8)
    return Segment(np.arange(n), points, colors)


@pytest.fixture
def catalog() -> Catalog:
    refs = tuple(describe(segment(WHITE).colors, segment(WHITE).points, TABLE_Z) for _ in range(2))
    return Catalog({"bowl": CatalogEntry("bowl", "bowl", refs, 0.05, 0.14)})


# -- decoding --------------------------------------------------------------------------------
def test_png_and_jpeg_decode_to_rgb() -> None:
    pixels = photo(PINK)
    assert np.array_equal(decode_image("png", encode(pixels)), pixels)
    jpeg = decode_image("jpeg", encode(pixels, "JPEG"))
    assert jpeg.shape == pixels.shape and jpeg.dtype == np.uint8
    assert np.abs(jpeg.astype(int) - pixels).mean() < 8
    grey = decode_image("png", encode(pixels[:, :, 0]))  # a grey photo still has three channels
    assert grey.shape == pixels.shape
    rgba = np.dstack([pixels, np.full(pixels.shape[:2], 255, np.uint8)])
    assert np.array_equal(decode_image("PNG", encode(rgba)), pixels)


@pytest.mark.parametrize(
    ("fmt", "data", "match"),
    [
        ("gif", b"GIF89a", "expected 'png' or 'jpeg'"),
        ("png", encode(photo(PINK), "JPEG"), "declared PNG but the data is JPEG"),
        ("png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, "does not decode as PNG"),
        ("png", encode(photo(PINK))[:300], "does not decode as PNG"),  # truncated
        ("jpeg", b"not an image", "does not decode as JPEG"),
        ("jpeg", b"", "does not decode as JPEG"),
    ],
)
def test_a_corrupt_image_is_a_value_error_saying_why(fmt: str, data: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        decode_image(fmt, data)


def test_a_huge_image_is_refused_before_its_pixels_are_decoded() -> None:
    with pytest.raises(ValueError, match="120x120 pixels, more than 1000"):
        decode_image("png", encode(photo(PINK)), max_pixels=1000)


# -- which memory changes matter ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("file", "key", "previous", "new", "expected"),
    [
        ("users/alice.md", "image", "", "images/alice/mug-image-0123.png", True),  # remembered
        ("users/alice.md", "image", "images/alice/mug-image-0123.png", "", True),  # forgotten
        ("users/alice.md", "", "", "", True),  # restore or seed: the whole file
        ("users/alice.md", "preference", "vegetarian", "vegan", False),
        ("scene.md", "contents", "", "images/alice/x.png", False),
        ("scene.md", "", "", "", False),
    ],
)
def test_only_changes_to_image_facts_or_whole_user_files_matter(
    file: str, key: str, previous: str, new: str, expected: bool
) -> None:
    assert concerns_reference_images(file, key, previous, new) is expected


# -- the catalog and labeller built with them ---------------------------------------------------
def test_a_photo_of_a_new_entity_makes_a_labeller_name_it(catalog: Catalog) -> None:
    base = CatalogLabeller(catalog, ["bowl"], piece_gap_m=0.05)
    before = base.label_segments([segment(PINK)], TABLE_Z)
    found = add_references(catalog, [ref("my_cover", encode(photo(PINK)))])
    labeller = labeller_with_references(base, found)
    assert before == [(None, 0.0)]
    assert labeller.label_segments([segment(PINK)], TABLE_Z)[0][0] == "my_cover"
    assert dict(found.entities) == {"my_cover": 1} and found.problems == ()
    assert found.summary() == "reference images from memory: my_cover (1)"
    assert labeller.candidates == ("bowl", "my_cover") and labeller.piece_gap_m == 0.05
    assert catalog.entries.keys() == {"bowl"}  # the configured catalog is never changed


def test_images_join_an_existing_entry_whatever_the_case_and_every_user_counts(catalog: Catalog) -> None:
    images = [ref("Bowl", encode(photo(WHITE))), ref("bowl", encode(photo(WHITE), "JPEG"), "jpeg", user="bob")]
    found = add_references(catalog, images)
    assert dict(found.entities) == {"bowl": 2}
    assert len(found.catalog.entries["bowl"].references) == 4
    assert found.catalog.entries["bowl"].height_m == 0.05  # its size is kept
    unrestricted = labeller_with_references(CatalogLabeller(catalog), found)
    assert unrestricted.candidates is None  # every entry stays a candidate


def test_corrupt_images_and_reserved_names_are_left_out_and_the_rest_counts(catalog: Catalog) -> None:
    images = [
        ref("cup", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64),
        ref("table", encode(photo(PINK))),
        ref("unknown_3", encode(photo(PINK))),
        ref("support_2", encode(photo(PINK))),
        ref("tiny", encode(photo(PINK, size=3))),
        ref("mug", encode(photo(PINK))),
    ]
    found = add_references(catalog, images)
    assert dict(found.entities) == {"mug": 1}
    assert len(found.problems) == 5
    assert found.problems[0].startswith("alice:cup.image (images/alice/cup-image.png): does not decode as PNG")
    assert found.problems[1] == (
        "alice:table.image (images/alice/table-image.png): 'table' is a label perception reserves; left out"
    )
    assert "expected an rgb image" in found.problems[4]
    assert set(found.catalog.entries) == {"bowl", "mug"}


def test_without_images_the_configured_catalog_is_used_again(catalog: Catalog) -> None:
    first = add_references(catalog, [ref("mug", encode(photo(PINK)))])
    again = add_references(catalog, [])  # the image was forgotten: built from the base, not from `first`
    assert "mug" in first.catalog.entries and again.catalog == catalog
    assert again.summary() == "reference images from memory: none"
