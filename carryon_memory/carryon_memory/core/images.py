"""Checks for remembered reference images (RememberImage): format, size, decodability.

The declared format must be PNG or JPEG and agree with the file's magic bytes; the
data must not exceed `max_image_bytes` (checked before anything is decoded) and must
decode completely with Pillow, with at most `MAX_PIXELS` pixels (a small file can
declare a huge image: decompression bombs are refused before pixels are allocated).
"""

from __future__ import annotations

import io
import re

from carryon_memory.core.errors import InvalidArgument

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
