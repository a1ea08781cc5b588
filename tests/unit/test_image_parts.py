"""gateway.images.parts: data URLs and base64 sources give the image's bytes;
http(s) URLs become remote placeholders; other schemes, non-image types and bad base64 are 400s naming
the part."""

from __future__ import annotations

import base64
import io

import pytest

from gateway.core.errors import APIError
from gateway.images.parts import (
    MAX_IMAGE_BYTES,
    RemoteImage,
    anthropic_image_source,
    image_from_url,
    image_part,
    openai_image_part,
    remote_of,
)


def _png() -> bytes:
    """A small real PNG made by Pillow."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(out, format="PNG")
    return out.getvalue()


PNG = _png()
B64 = base64.b64encode(PNG).decode()


def test_data_url_and_detail():
    """A PNG data URL (any accepted detail) gives the PNG's bytes."""
    assert image_from_url(f"data:image/png;base64,{B64}", "p") == PNG
    for detail in ("auto", "low", "high"):
        assert openai_image_part({"url": f"data:image/png;base64,{B64}", "detail": detail}, "p") == PNG


def test_remote_urls_become_placeholders():
    """http(s) URLs are not fetched here: they become RemoteImage values,
    whose wire placeholder round-trips and is never a valid digest."""
    assert image_from_url("https://example.com/a.png", "m.url") == RemoteImage("https://example.com/a.png", "m.url")
    source = anthropic_image_source({"type": "url", "url": "http://x/y.png"}, "s")
    assert source == RemoteImage("http://x/y.png", "s.url")
    part = image_part(source, 3)
    assert remote_of(part) == source and part.offset == 3 and len(part.sha256) != 64
    real = image_part(PNG, 0)
    assert remote_of(real) is None and len(real.sha256) == 64


def test_anthropic_base64_source():
    """A base64 source with an image media type gives its bytes."""
    assert anthropic_image_source({"type": "base64", "media_type": "image/png", "data": B64}, "p") == PNG


@pytest.mark.parametrize(
    ("call", "param", "message"),
    [
        (lambda: image_from_url("file:///etc/passwd", "m.url"), "m.url", "must be a data:image"),
        (lambda: image_from_url("/etc/passwd", "m.url"), "m.url", "must be a data:image"),
        (lambda: image_from_url(f"data:text/plain;base64,{B64}", "m.url"), "m.url", "unsupported image media type"),
        (lambda: image_from_url("data:image/png,rawbytes", "m.url"), "m.url", "must be base64-encoded"),
        (lambda: image_from_url("data:image/png;base64,@@@", "m.url"), "m.url", "not valid base64"),
        (
            lambda: openai_image_part({"url": "data:image/png;base64,AA==", "detail": "max"}, "i"),
            "i.detail",
            "'detail'",
        ),
        (lambda: openai_image_part({"url": "x", "size": 1}, "i"), "i.size", "unknown field 'size'"),
        (lambda: anthropic_image_source({"type": "url", "url": "file:///etc/passwd"}, "s"), "s.url", "http(s) URL"),
        (lambda: anthropic_image_source({"type": "file", "file_id": "f"}, "s"), "s", "'file' is not supported"),
        (
            lambda: anthropic_image_source({"type": "base64", "media_type": "image/svg+xml", "data": B64}, "s"),
            "s.media_type",
            "unsupported image media type",
        ),
        (
            lambda: anthropic_image_source({"type": "base64", "media_type": "image/png", "data": ""}, "s"),
            "s.data",
            "non-empty base64",
        ),
        (
            lambda: anthropic_image_source(
                {"type": "base64", "media_type": "image/png", "data": "A" * (MAX_IMAGE_BYTES * 2)}, "s"
            ),
            "s.data",
            "larger than",
        ),
    ],
)
def test_refusals_name_the_part(call, param, message):
    """Each bad part is a 400 invalid_image naming the part."""
    with pytest.raises(APIError) as caught:
        call()
    assert caught.value.status == 400
    assert caught.value.param == param
    assert caught.value.code == "invalid_image"
    assert message in str(caught.value)
