"""Decoding a request's image bytes into pictures a vision model's
processor takes, with the limits that make untrusted bytes safe.

Runs on the worker's input thread (never the scheduler thread, never the
gateway's event loop) and touches no MLX. Every refusal is an
:class:`ImageError` naming which image is at fault, so the caller can
answer a 400 that points at the request part.

Limits, checked in this order for each image:

1. count: at most ``max_images`` images in one request;
2. size: at most ``max_bytes`` bytes each;
3. type: the bytes must open as PNG, JPEG, GIF or WebP (the sniffed
   format, not a client's claim);
4. dimensions: each side at most ``max_side`` pixels and at most
   ``max_pixels`` pixels in all, checked from the header before any pixel
   is decoded (so a decompression bomb is refused without being inflated);
5. integrity: the whole image must decode (a truncated file is refused).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PIL.Image import Image

FORMATS = ("PNG", "JPEG", "GIF", "WEBP")
"""The image formats accepted, as Pillow names them."""


@dataclass(frozen=True)
class ImageLimits:
    """Per-request bounds on images (see the module docstring)."""

    max_images: int = 8
    max_bytes: int = 20 * 1024 * 1024
    max_side: int = 8192
    max_pixels: int = 40_000_000


DEFAULT_LIMITS = ImageLimits()
"""The limits used when a caller gives none."""


class ImageError(ValueError):
    """An image a request carries cannot be used. ``index`` is its position
    among the request's images (None when the request as a whole is at
    fault, e.g. too many images); the message is safe to show a client."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


def decode_images(blobs: list[bytes], limits: ImageLimits = DEFAULT_LIMITS) -> list[Image]:
    """The RGB pictures in ``blobs``, in order.

    Raises:
        ImageError: for the first image that breaks a limit of the module
            docstring, naming it by its index.
        ImportError: when Pillow (the ``vision`` extra) is not installed.
    """
    if len(blobs) > limits.max_images:
        raise ImageError(f"too many images: {len(blobs)} given, at most {limits.max_images} per request")
    return [_decode_one(blob, index, limits) for index, blob in enumerate(blobs)]


def _decode_one(blob: bytes, index: int, limits: ImageLimits) -> Image:
    """One image decoded under ``limits`` (raises ImageError naming ``index``)."""
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    if len(blob) > limits.max_bytes:
        raise ImageError(f"image {index} is {len(blob)} bytes, over the limit of {limits.max_bytes}", index)
    try:
        # formats= restricts sniffing to the accepted types; the header alone is read here
        picture = PILImage.open(io.BytesIO(blob), formats=FORMATS)
    except UnidentifiedImageError:
        raise ImageError(
            f"image {index} is not a PNG, JPEG, GIF or WebP image (or its header is damaged)", index
        ) from None
    except PILImage.DecompressionBombError:
        raise ImageError(
            f"image {index} claims more pixels than Pillow's MAX_IMAGE_PIXELS safety limit allows "
            f"(a decompression bomb); at most {limits.max_pixels} pixels are accepted",
            index,
        ) from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise ImageError(f"image {index} is truncated or corrupt ({type(exc).__name__})", index) from None
    width, height = picture.size
    if width < 1 or height < 1 or max(width, height) > limits.max_side or width * height > limits.max_pixels:
        raise ImageError(
            f"image {index} is {width}x{height} pixels: each side may be at most {limits.max_side} "
            f"and the area at most {limits.max_pixels} pixels",
            index,
        )
    try:
        picture.load()
        return picture.convert("RGB")
    except (OSError, ValueError, SyntaxError, PILImage.DecompressionBombError) as exc:
        raise ImageError(f"image {index} is truncated or corrupt ({type(exc).__name__})", index) from None
