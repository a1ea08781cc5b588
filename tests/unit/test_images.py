"""worker.vision.images: real PNG/JPEG bytes made with Pillow decode; every bad
image (too many, too large, wrong type, enormous dimensions, decompression
bomb, truncated) is refused with an ImageError naming it."""

from __future__ import annotations

import io
import struct
import zlib

import pytest

from worker.vision.images import ImageError, ImageLimits, decode_images


def _encode(fmt: str, size=(32, 24), color=(10, 200, 30), mode="RGB") -> bytes:
    """An image of ``size`` in ``fmt`` made by Pillow."""
    from PIL import Image

    out = io.BytesIO()
    Image.new(mode, size, color).save(out, format=fmt)
    return out.getvalue()


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG claiming ``width`` x ``height`` with a tiny compressed body: a
    decompression bomb's header (the pixels are never inflated)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def test_png_jpeg_webp_gif_decode_to_rgb():
    """Each accepted format decodes to an RGB picture of its size."""
    blobs = [_encode("PNG"), _encode("JPEG"), _encode("WEBP"), _encode("GIF", mode="P", color=3)]
    pictures = decode_images(blobs)
    assert [p.size for p in pictures] == [(32, 24)] * 4
    assert {p.mode for p in pictures} == {"RGB"}
    assert pictures[0].getpixel((0, 0)) == (10, 200, 30)


def test_too_many_images():
    """More images than max_images: refused as a whole (no index)."""
    with pytest.raises(ImageError, match="too many images: 3 given, at most 2") as caught:
        decode_images([_encode("PNG")] * 3, ImageLimits(max_images=2))
    assert caught.value.index is None


def test_too_many_bytes_names_the_image():
    """An image over max_bytes is refused by index."""
    with pytest.raises(ImageError, match="image 1 is .* bytes, over the limit of 100") as caught:
        decode_images([_encode("PNG", size=(2, 2)), b"x" * 101], ImageLimits(max_bytes=100))
    assert caught.value.index == 1


@pytest.mark.parametrize(
    "blob", [b"not an image at all", b"%PDF-1.4 hello", b"<svg xmlns='http://www.w3.org/2000/svg'/>"]
)
def test_wrong_type(blob):
    """Bytes that are not an accepted image format are refused."""
    with pytest.raises(ImageError, match="image 0 is not a PNG, JPEG, GIF or WebP") as caught:
        decode_images([blob])
    assert caught.value.index == 0


def test_unaccepted_format_is_wrong_type():
    """A real image in a format outside FORMATS (BMP) is refused too."""
    with pytest.raises(ImageError, match="is not a PNG, JPEG"):
        decode_images([_encode("BMP")])


def test_enormous_dimensions_and_bomb_refused_from_the_header():
    """A side over max_side, or an area over max_pixels, is refused before
    decoding; a 60000x60000 PNG of a few bytes (a decompression bomb) is
    refused by Pillow's own limit even when ours are raised past it."""
    with pytest.raises(ImageError, match="image 0 is 20000x100 pixels"):
        decode_images([_png_header_only(20000, 100)])
    with pytest.raises(ImageError, match="image 0 claims more pixels than Pillow's MAX_IMAGE_PIXELS"):
        decode_images([_png_header_only(60000, 60000)], ImageLimits(max_side=100_000, max_pixels=10**10))
    with pytest.raises(ImageError, match="image 0 is 5000x5000 pixels"):
        decode_images([_png_header_only(5000, 5000)], ImageLimits(max_pixels=1_000_000))
    with pytest.raises(ImageError, match="image 0 is 100x10 pixels: each side may be at most 64"):
        decode_images([_encode("PNG", size=(100, 10))], ImageLimits(max_side=64))


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_truncated(fmt):
    """An image cut short is refused as truncated or corrupt."""
    blob = _encode(fmt, size=(64, 64))
    with pytest.raises(ImageError, match="image 1 is truncated or corrupt") as caught:
        decode_images([_encode("PNG"), blob[: len(blob) // 2]])
    assert caught.value.index == 1
