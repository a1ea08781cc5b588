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

Videos (OpenAI chat ``video_url`` parts, the shape vLLM and mlx-vlm's
server read) travel the same way as a part of kind ``video``, under
:data:`MAX_VIDEO_BYTES`; refusals have code ``invalid_video``. Audio
(OpenAI chat ``input_audio`` parts) as a part of kind ``audio``, under
:data:`MAX_AUDIO_BYTES`; refusals have code ``invalid_audio``.

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

VIDEO_MEDIA_TYPES = frozenset(
    {"video/mp4", "video/webm", "video/quicktime", "video/x-matroska", "video/x-msvideo", "video/mpeg", "video/ogg"}
)
"""The media types a client may declare for a video (the worker decides
from the bytes whether it can read them)."""

AUDIO_FORMATS = frozenset({"wav", "mp3"})
"""The ``format`` values of an OpenAI ``input_audio`` part."""

MAX_AUDIO_BYTES = 20 * 1024 * 1024
"""The largest decoded audio clip accepted from a client, in bytes."""

MAX_VIDEO_BYTES = 48 * 1024 * 1024
"""The largest decoded video accepted from a client, in bytes (what one
request may carry to its worker; a model's ``video_max_bytes`` may be
lower)."""


REMOTE = "remote:"
"""How a :func:`remote_part` placeholder's ``sha256`` starts (never a hex
digest, so a placeholder that reached a worker would fail its digest
check)."""


@dataclass(frozen=True)
class RemoteImage:
    """An image (``media`` ``video``: a video) named by an ``http(s)`` URL,
    not fetched yet; ``param`` is the request part that named it."""

    url: str
    param: str
    media: str = "image"


def image_part(source: bytes | RemoteImage, offset: int, param: str = "", kind: str = "image") -> ImagePart:
    """The wire part for an image (``kind`` ``video``: a video) at character
    ``offset`` of its turn's text, from request part ``param``: its bytes
    with their digest, or a placeholder for a remote one (which carries its
    own param and kind)."""
    if isinstance(source, RemoteImage):
        return remote_part(source, offset)
    return ImagePart(data=source, sha256=hashlib.sha256(source).hexdigest(), offset=offset, param=param, kind=kind)


def remote_part(image: RemoteImage, offset: int) -> ImagePart:
    """A placeholder part for a remote image or video: the URL in ``data``
    and the param after :data:`REMOTE` in ``sha256``."""
    return ImagePart(
        data=image.url.encode(), sha256=REMOTE + image.param, offset=offset, param=image.param, kind=image.media
    )


def remote_of(part: ImagePart) -> RemoteImage | None:
    """The remote image a placeholder part stands for (None: a real part)."""
    if not part.sha256.startswith(REMOTE):
        return None
    return RemoteImage(part.data.decode(), part.sha256[len(REMOTE) :], part.kind)


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


def openai_video_part(video_url: Any, param: str) -> bytes | RemoteImage:
    """The bytes of an OpenAI-style chat ``video_url`` part's value
    (``{"url"}``: a ``data:video/...;base64,...`` URL), or the
    :class:`RemoteImage` (media ``video``) of an ``http(s)`` URL.

    Raises:
        APIError: 400 (code ``invalid_video``) for an unknown key, another
            URL scheme, a non-video or non-base64 data URL, empty or bad
            base64, or more than :data:`MAX_VIDEO_BYTES`.
    """
    if not isinstance(video_url, dict):
        raise bad_request("'video_url' must be an object with a 'url'", param=param, code="invalid_video")
    unknown = sorted(set(video_url) - {"url"})
    if unknown:
        raise bad_request(
            f"unknown field {unknown[0]!r} in 'video_url'", param=f"{param}.{unknown[0]}", code="invalid_video"
        )
    url, where = video_url.get("url"), f"{param}.url"
    if not isinstance(url, str) or not url:
        raise bad_request("a video URL must be a non-empty string", param=where, code="invalid_video")
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme in ("http", "https"):
        return RemoteImage(url, where, "video")
    header, comma, data = url[5:].partition(",") if scheme == "data" else ("", "", "")
    if not comma or not header.lower().endswith(";base64"):
        raise bad_request(
            "a video URL must be an http(s) URL or a data:video/...;base64,... URL", param=where, code="invalid_video"
        )
    media = header[: -len(";base64")].split(";", 1)[0].strip().lower()
    if media not in VIDEO_MEDIA_TYPES:
        accepted = ", ".join(sorted(VIDEO_MEDIA_TYPES))
        raise bad_request(
            f"unsupported video media type {media[:40]!r}: use one of {accepted}", param=where, code="invalid_video"
        )
    if not data:
        raise bad_request("a video's data must be non-empty base64", param=where, code="invalid_video")
    if len(data) > (MAX_VIDEO_BYTES * 4) // 3 + 4:
        raise bad_request(f"the video is larger than {MAX_VIDEO_BYTES} bytes", param=where, code="invalid_video")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise bad_request("the video's data is not valid base64", param=where, code="invalid_video") from None


def openai_audio_part(input_audio: Any, param: str) -> bytes:
    """The bytes of an OpenAI chat ``input_audio`` part's value
    (``{"data": base64, "format": "wav" | "mp3"}``).

    Raises:
        APIError: 400 (code ``invalid_audio``) for an unknown or missing
            key, another format, empty or bad base64, or more than
            :data:`MAX_AUDIO_BYTES`.
    """
    if not isinstance(input_audio, dict):
        raise bad_request("'input_audio' must be an object with 'data' and 'format'", param=param, code="invalid_audio")
    unknown = sorted(set(input_audio) - {"data", "format"})
    if unknown:
        raise bad_request(
            f"unknown field {unknown[0]!r} in 'input_audio'", param=f"{param}.{unknown[0]}", code="invalid_audio"
        )
    if input_audio.get("format") not in AUDIO_FORMATS:
        raise bad_request("'format' must be 'wav' or 'mp3'", param=f"{param}.format", code="invalid_audio")
    data, where = input_audio.get("data"), f"{param}.data"
    if not isinstance(data, str) or not data:
        raise bad_request("an audio clip's data must be a non-empty base64 string", param=where, code="invalid_audio")
    if len(data) > (MAX_AUDIO_BYTES * 4) // 3 + 4:
        raise bad_request(f"the audio clip is larger than {MAX_AUDIO_BYTES} bytes", param=where, code="invalid_audio")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise bad_request("the audio clip's data is not valid base64", param=where, code="invalid_audio") from None
