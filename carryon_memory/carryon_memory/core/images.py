"""Remembered reference images: checks when one is stored (RememberImage), and reading
them back for perception's catalog (GetReferenceImages).

The declared format must be PNG or JPEG and agree with the file's magic bytes; the
data must not exceed `max_image_bytes` (checked before anything is decoded) and must
decode completely with Pillow, with at most `MAX_PIXELS` pixels (a small file can
declare a huge image: decompression bombs are refused before pixels are allocated).

A stored image is images/<user_id>/<name>.png|jpg, the value of a fact of that user.
Only such paths are read back (no other folder, no `..`): a fact value is text a person
may have edited.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

from carryon_memory.core.errors import InvalidArgument
from carryon_memory.core.files import IMAGES_DIR, user_file
from carryon_memory.core.types import Fact, Problem, StoredImage

MAX_PIXELS = 40_000_000
_MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "jpeg": b"\xff\xd8\xff"}
_EXTENSION = {"png": "png", "jpeg": "jpg"}


def declared_format(text: str) -> str:
    """'png' or 'jpeg' from a CompressedImage.format string ("png", "jpeg", "jpg",
    "bgr8; jpeg compressed bgr8", ...); InvalidArgument for anything else."""
    words = set(re.split(r"[^a-z0-9]+", text.lower()))
    found = {"png"} & words | ({"jpeg"} if words & {"jpeg", "jpg"} else set())
    if len(found) != 1:
        raise InvalidArgument(f"image format {text!r}: expected 'png' or 'jpeg'")
    return found.pop()


def check_image(format_text: str, data: bytes, max_bytes: int) -> str:
    """Validate an encoded image; return the file extension to store it under ('png' / 'jpg')."""
    fmt = declared_format(format_text)
    if not data:
        raise InvalidArgument("image data is empty")
    if len(data) > max_bytes:
        raise InvalidArgument(f"image is {len(data)} bytes, more than max_image_bytes={max_bytes}")
    if not data.startswith(_MAGIC[fmt]):
        actual = next((name for name, magic in _MAGIC.items() if data.startswith(magic)), None)
        what = f"the data is {actual.upper()}" if actual else "the data is neither PNG nor JPEG"
        raise InvalidArgument(f"image declared as {fmt!r} but {what} (magic bytes)")
    from PIL import Image, UnidentifiedImageError  # only image requests need Pillow

    try:
        with Image.open(io.BytesIO(data), formats=[fmt.upper()]) as image:
            width, height = image.size
            if width * height > MAX_PIXELS:
                raise InvalidArgument(f"image is {width}x{height} pixels, more than {MAX_PIXELS}")
            image.load()
    except InvalidArgument:
        raise
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise InvalidArgument(f"image does not decode as {fmt.upper()}: {exc}") from None
    return _EXTENSION[fmt]


_STORED_NAME = re.compile(r"[a-z0-9_-]+\.(png|jpg)")
_FORMAT_OF_EXTENSION = {extension: fmt for fmt, extension in _EXTENSION.items()}


def stored_image(root: Path, user_id: str, fact: Fact, max_bytes: int) -> StoredImage | Problem | None:
    """The image a fact of `user_id` points at, read from the memory folder `root`.

    None when the fact is no image (its value does not start with images/); a Problem (of
    the user's file, naming the fact) when it names a path the store never writes, or a
    file that is missing or larger than `max_bytes`. The bytes are not decoded."""
    if not fact.value.startswith(f"{IMAGES_DIR}/"):
        return None
    where = user_file(user_id)
    what = f"{fact.entity}.{fact.key}"
    folder, _, name = fact.value.removeprefix(f"{IMAGES_DIR}/").partition("/")
    match = _STORED_NAME.fullmatch(name)
    if folder != user_id or match is None:
        return Problem(
            where,
            0,
            f"{what}: {fact.value!r} is not an image path of this user "
            f"({IMAGES_DIR}/{user_id}/<name>.png|jpg); left out",
        )
    path = root / fact.value
    try:
        size = path.stat().st_size
        if size > max_bytes:
            return Problem(
                where, 0, f"{what}: {fact.value} is {size} bytes, more than max_image_bytes={max_bytes}; left out"
            )
        data = path.read_bytes()
    except FileNotFoundError:
        return Problem(where, 0, f"{what}: {fact.value} does not exist; left out")
    except OSError as exc:
        return Problem(where, 0, f"{what}: {fact.value} unreadable ({exc.strerror}); left out")
    return StoredImage(user_id, fact.entity, fact.key, fact.value, _FORMAT_OF_EXTENSION[match.group(1)], data)
