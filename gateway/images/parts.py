"""Turning the image parts of OpenAI, Responses and Anthropic requests into
the raw bytes a vision worker decodes.

Pure functions over already-parsed JSON values; they run on the event loop
and do only bounded work (a base64 decode of a body the gateway already
holds). They never open a file or a connection. A remote ``http(s)`` URL
becomes a :func:`remote_part`, a placeholder that
:mod:`gateway.images.request` resolves (fetching it under the ``[images]``
policy, or refusing it) before the request reaches a worker; every other
image becomes an :func:`image_part` carrying its bytes and their SHA-256.
Whether the bytes are a valid picture is decided by the worker
(:mod:`worker.vision.images`) off the scheduler thread.

Every refusal is :func:`gateway.core.errors.bad_request` naming the offending
part (``param``) with code ``invalid_image``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from typing import Any

from gateway.core.errors import APIError, bad_request
from shared.protocol import ImagePart

MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""The media types a client may declare for an image."""

DETAILS = frozenset({"auto", "low", "high", "original"})
"""The OpenAI ``detail`` values accepted (recorded; mlxd gives every image
the model's own resolution)."""

MAX_IMAGE_BYTES = 20 * 1024 * 1024
"""The largest decoded image accepted from a client, in bytes."""


REMOTE = "remote:"
"""How a :func:`remote_part` placeholder's ``sha256`` starts (never a hex
digest, so a placeholder that reached a worker would fail its digest
check)."""


@dataclass(frozen=True)
class RemoteImage:
    """An image named by an ``http(s)`` URL, not fetched yet; ``param`` is
    the request part that named it."""

    url: str
    param: str


def image_part(source: bytes | RemoteImage, offset: int, param: str = "") -> ImagePart:
    """The wire part for an image at character ``offset`` of its turn's
    text, from request part ``param``: its bytes with their digest, or a
    placeholder for a remote one (which carries its own param)."""
    if isinstance(source, RemoteImage):
        return remote_part(source, offset)
    return ImagePart(data=source, sha256=hashlib.sha256(source).hexdigest(), offset=offset, param=param)


def remote_part(image: RemoteImage, offset: int) -> ImagePart:
    """A placeholder part for a remote image: the URL in ``data`` and the
    param after :data:`REMOTE` in ``sha256``."""
    return ImagePart(data=image.url.encode(), sha256=REMOTE + image.param, offset=offset, param=image.param)


def remote_of(part: ImagePart) -> RemoteImage | None:
    """The remote image a placeholder part stands for (None: a real part)."""
    if not part.sha256.startswith(REMOTE):
        return None
    return RemoteImage(part.data.decode(), part.sha256[len(REMOTE) :])


def _invalid(message: str, param: str) -> APIError:
    """The 400 for an unusable image part."""
    return bad_request(message, param=param, code="invalid_image")


def _decoded(data: Any, param: str) -> bytes:
    """The bytes of base64 ``data``.

    Raises:
        APIError: 400 when it is not a string of valid base64, is empty,
            or decodes to more than :data:`MAX_IMAGE_BYTES`.
    """
    if not isinstance(data, str) or not data:
        raise _invalid("an image's data must be a non-empty base64 string", param)
    if len(data) > (MAX_IMAGE_BYTES * 4) // 3 + 4:
        raise _invalid(f"the image is larger than {MAX_IMAGE_BYTES} bytes", param)
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise _invalid("the image's data is not valid base64", param) from None


def image_from_base64(data: Any, param: str) -> bytes:
    """The bytes of an image given as bare base64 (Ollama's ``images``).

    Raises:
        APIError: 400 for data that is not valid, non-empty base64 or is too
            large (see :data:`MAX_IMAGE_BYTES`).
    """
    return _decoded(data, param)


def _media_type(value: str, param: str) -> str:
    """``value`` lower-cased when it is an accepted image media type.

    Raises:
        APIError: 400 naming the accepted types otherwise.
    """
    media = value.strip().lower()
    if media not in MEDIA_TYPES:
        accepted = ", ".join(sorted(MEDIA_TYPES))
        raise _invalid(f"unsupported image media type {value[:40]!r}: use one of {accepted}", param)
    return media


def image_from_url(url: Any, param: str) -> bytes | RemoteImage:
    """The bytes of an image given as a URL (OpenAI chat ``image_url.url``,
    Responses ``input_image.image_url``), or the :class:`RemoteImage` of
    an ``http(s)`` URL (resolved later, see the module docstring).

    Otherwise only ``data:<image type>;base64,<data>`` URLs are accepted.

    Raises:
        APIError: 400 for any other scheme, a non-image or non-base64 data
            URL, or bad data.
    """
    if not isinstance(url, str) or not url:
        raise _invalid("an image URL must be a non-empty string", param)
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme in ("http", "https"):
        return RemoteImage(url, param)
    if scheme != "data":
        raise _invalid("an image URL must be a data:image/...;base64,... URL", param)
    header, comma, data = url[5:].partition(",")
    if not comma or not header.lower().endswith(";base64"):
        raise _invalid("an image data URL must be base64-encoded (data:image/...;base64,...)", param)
    _media_type(header[: -len(";base64")].split(";", 1)[0], param)
    return _decoded(data, param)


def openai_image_part(image_url: Any, param: str) -> bytes | RemoteImage:
    """The bytes of an OpenAI chat ``image_url`` part's value
    (``{"url", "detail"?}``; ``detail`` is accepted and has no effect).

    Raises:
        APIError: 400 for an unknown key, a bad ``detail``, or a bad URL
            (see :func:`image_from_url`).
    """
    if not isinstance(image_url, dict):
        raise _invalid("'image_url' must be an object with a 'url'", param)
    unknown = sorted(set(image_url) - {"url", "detail"})
    if unknown:
        raise _invalid(f"unknown field {unknown[0]!r} in 'image_url'", f"{param}.{unknown[0]}")
    detail = image_url.get("detail")
    if detail is not None and detail not in DETAILS:
        raise _invalid(f"'detail' must be one of {', '.join(sorted(DETAILS))}", f"{param}.detail")
    return image_from_url(image_url.get("url"), f"{param}.url")


def anthropic_image_source(source: Any, param: str) -> bytes | RemoteImage:
    """The bytes of an Anthropic ``image`` block's ``source``
    (``{"type": "base64", "media_type", "data"}``), or the
    :class:`RemoteImage` of a ``{"type": "url", "url"}`` source with an
    ``http(s)`` URL.

    Raises:
        APIError: 400 for another URL scheme, a ``file`` source (no Files
            API), an unknown field, an unsupported media type or bad data.
    """
    if not isinstance(source, dict):
        raise _invalid("an image's 'source' must be an object", param)
    kind = source.get("type")
    if kind == "url":
        unknown = sorted(set(source) - {"type", "url"})
        if unknown:
            raise _invalid(f"unknown field {unknown[0]!r} in the image source", f"{param}.{unknown[0]}")
        url = source.get("url")
        if not isinstance(url, str) or url.split(":", 1)[0].lower() not in ("http", "https"):
            raise _invalid("an image source's 'url' must be an http(s) URL", f"{param}.url")
        return RemoteImage(url, f"{param}.url")
    if kind != "base64":
        raise _invalid(f"image source type {str(kind)[:40]!r} is not supported: send a base64 source", param)
    unknown = sorted(set(source) - {"type", "media_type", "data"})
    if unknown:
        raise _invalid(f"unknown field {unknown[0]!r} in the image source", f"{param}.{unknown[0]}")
    media = source.get("media_type")
    if not isinstance(media, str):
        raise _invalid("an image source needs a 'media_type'", f"{param}.media_type")
    _media_type(media, f"{param}.media_type")
    return _decoded(source.get("data"), f"{param}.data")
