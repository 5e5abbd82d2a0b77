"""Reference images from user memory in perception's object catalog.

Users remember photos of their own objects (`carryon memory remember-image`: memory_node
stores them and serves them back, bytes included, on memory/get_reference_images).
perception_node asks for them at start-up and after each memory/changed that concerns an
image, and then labels with the catalog built here: the configured catalog (never the
previous one, so an image no longer remembered is gone) plus one colour reference per
image for its entity (`Catalog.with_reference_images`: the photo's central region, its
background colours removed; a new entity becomes an entry of its own, size unknown).

An entity's name is the label: an existing entry of the same name (or the same name in
another case) gains the references; entities of several users with the same name share
them (perception cannot tell whose object it sees). An image that does not decode, is
too large or too small, or whose entity is a label perception reserves (robot, table,
support_<n>, unknown_<n>) is left out with a reason; the others still count.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from carryon_common.core.names import MEMORY_IMAGES_DIR
from carryon_perception.core.build import CatalogLabeller
from carryon_perception.core.catalog import Catalog
from carryon_perception.core.types import ROBOT_LABEL, TABLE_LABEL, UNKNOWN_PREFIX

# Largest image decoded (pixels): a small file can declare a huge image; it is refused
# before its pixels are allocated. memory_node refuses the same when an image is stored.
MAX_PIXELS = 40_000_000
_RESERVED = re.compile(rf"{ROBOT_LABEL}|{TABLE_LABEL}|support_\d+|{UNKNOWN_PREFIX}.*")
_FORMATS = {"png": "PNG", "jpeg": "JPEG", "jpg": "JPEG"}


@dataclass(frozen=True)
class ReferenceImage:
    """A photo of a user's entity as memory stores it: `data` encoded as `image_format`
    ('png' or 'jpeg'); `path` where memory keeps it (relative to its folder, for messages)."""

    user_id: str
    entity: str
    key: str
    path: str
    image_format: str
    data: bytes

    @property
    def name(self) -> str:
        """How diagnostics name it: `user:entity.key`."""
        return f"{self.user_id}:{self.entity}.{self.key}"


@dataclass(frozen=True)
class References:
    """The catalog with the reference images added; `entities`: catalog name -> images it
    gained (sorted by name); `problems`: one line per image left out, naming it and why."""

    catalog: Catalog
    entities: Mapping[str, int]
    problems: tuple[str, ...]

    def summary(self) -> str:
        """`reference images: mug (1), my_bowl (2)` (or `none`), for the node's status."""
        listed = ", ".join(f"{name} ({count})" for name, count in self.entities.items()) or "none"
        return f"reference images from memory: {listed}"


def concerns_reference_images(file: str, key: str, previous_value: str, new_value: str) -> bool:
    """Whether a memory change (a MemoryChange's fields) may add or remove a reference image:
    a change to a user's file that sets or removes a value under images/, or replaces the
    whole file (restore, seed: `key` is empty then)."""
    if not file.startswith("users/"):
        return False
    prefix = f"{MEMORY_IMAGES_DIR}/"
    return not key or previous_value.startswith(prefix) or new_value.startswith(prefix)


def decode_image(image_format: str, data: bytes, max_pixels: int = MAX_PIXELS) -> npt.NDArray[np.uint8]:
    """The pixels (H, W, 3) uint8 rgb of an encoded PNG or JPEG. ValueError saying why for
    another format, data of another format than declared, too many pixels, or data that
    does not decode completely."""
    declared = _FORMATS.get(image_format.strip().lower())
    if declared is None:
        raise ValueError(f"format {image_format!r}: expected 'png' or 'jpeg'")
    from PIL import Image  # only reference images need Pillow

    rgb = None
    try:
        with Image.open(io.BytesIO(data), formats=["PNG", "JPEG"]) as image:
            found, (width, height) = image.format, image.size
            if found == declared and width * height <= max_pixels:
                rgb = np.asarray(image.convert("RGB"), dtype=np.uint8)
    except Exception as exc:  # noqa: BLE001 - bytes from disk: whatever the decoder raises, they do not decode
        raise ValueError(f"does not decode as {declared}: {type(exc).__name__}: {exc}") from None
    if found != declared:
        raise ValueError(f"declared {declared} but the data is {found}")
    if rgb is None:
        raise ValueError(f"{width}x{height} pixels, more than {max_pixels}")
    return rgb


def catalog_name(catalog: Catalog, entity: str) -> str:
    """The catalog name an entity's images go to: the entity, or an existing entry whose
    name differs only in case."""
    if entity in catalog.entries:
        return entity
    folded = entity.casefold()
    return next((name for name in sorted(catalog.entries) if name.casefold() == folded), entity)


def add_references(base: Catalog, images: Sequence[ReferenceImage]) -> References:
    """`base` with every usable image added to its entity's entry (module docstring)."""
    catalog = base
    counts: dict[str, int] = {}
    problems = []
    for image in images:
        name = catalog_name(catalog, image.entity.strip())
        if _RESERVED.fullmatch(name):
            problems.append(f"{image.name} ({image.path}): {name!r} is a label perception reserves; left out")
            continue
        try:
            catalog = catalog.with_reference_images(name, [decode_image(image.image_format, image.data)])
        except ValueError as exc:
            problems.append(f"{image.name} ({image.path}): {exc}; left out")
            continue
        counts[name] = counts.get(name, 0) + 1
    return References(catalog, dict(sorted(counts.items())), tuple(problems))


def labeller_with_references(base: CatalogLabeller, references: References) -> CatalogLabeller:
    """A labeller like `base` that labels with `references.catalog`. When `base` is
    restricted to the objects the scene holds, the entities with reference images join
    them: a user who remembered a photo of their object expects it to be recognised."""
    candidates: tuple[str, ...] = ()
    if base.candidates is not None:
        candidates = (*base.candidates, *(n for n in references.entities if n not in base.candidates))
    return CatalogLabeller(
        references.catalog,
        candidates,
        piece_gap_m=base.piece_gap_m,
        fragment_px=base.fragment_px,
        fragment_gap_m=base.fragment_gap_m,
    )
