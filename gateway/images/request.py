"""Making a request's images ready for its worker: the one place, for every
protocol, where images meet the model they are sent to.

:func:`ready_images` runs in :meth:`gateway.workers.pool.WorkerPool.submit`, after
the protocol's translation (which leaves remote ``http(s)`` images as
placeholders, :mod:`gateway.images.parts`) and before anything reaches a
worker: a model known to take no images refuses them with a 400, and each
remote image is fetched through :func:`gateway.images.remote.fetch_remote_image`
under the ``[images]`` policy (a 400 naming the part when the policy
refuses it). Runs on the event loop; the fetch never blocks it.
"""

from __future__ import annotations

import msgspec

from gateway.core.backend import ModelBackend
from gateway.core.errors import bad_request
from gateway.images.parts import image_part, remote_of
from gateway.images.remote import fetch_remote_image
from shared.config import ImagesConfig
from shared.model_kind import AUDIO_MODELS, VIDEO_MODELS, ModelKind, cannot_read_message, no_vision_message
from shared.protocol import ChatMessage, GenerateRequest, ImagePart

MAX_REQUEST_IMAGE_BYTES = 48 * 1024 * 1024
"""The most image and video bytes one request may carry to its worker, in all: under
the wire's frame cap (:data:`shared.codec.MAX_FRAME_BYTES`), which fetched
remote images could otherwise exceed."""


def has_images(request: GenerateRequest) -> bool:
    """Whether any message of ``request`` carries an image."""
    return any(message.images for message in request.messages or ())


async def ready_images(
    request: GenerateRequest, model: str, kind: ModelKind | None, policy: ImagesConfig
) -> GenerateRequest:
    """``request`` with every remote image replaced by its fetched bytes
    (unchanged when it has no images). ``kind`` is the model's (None: not
    known here; the worker then refuses images itself if it has no
    vision).

    Raises:
        APIError: 400 for an audio part sent to a model known not to be
            a vision model (code ``model_has_no_audio``, naming the part
            and the model's kind; a vision model's worker refuses audio
            itself unless its family reads it), when ``model`` is known to
            take no images (a video
            part: code ``model_has_no_video``, naming the part and the
            model's kind), or (code
            ``invalid_image``, naming the part) when a remote image may not
            be fetched or its fetch fails, or the images add up to more
            than :data:`MAX_REQUEST_IMAGE_BYTES`.
    """
    if not has_images(request):
        return request
    audio = _first(request, "audio")
    if audio is not None and kind is not None and kind != "vision":
        raise bad_request(
            cannot_read_message(model, kind, "audio", AUDIO_MODELS),
            param=audio.param or "messages",
            code="model_has_no_audio",
        )
    if kind is not None and kind != "vision":
        video = _first(request, "video")
        if video is not None:
            raise bad_request(
                cannot_read_message(model, kind, "videos", VIDEO_MODELS),
                param=video.param or "messages",
                code="model_has_no_video",
            )
        raise bad_request(no_vision_message(model), param="messages", code="model_has_no_vision")
    messages: list[ChatMessage] = []
    total = 0
    for message in request.messages or ():
        parts = []
        for part in message.images or ():
            remote = remote_of(part)
            if remote is not None:
                body = await fetch_remote_image(remote.url, policy, remote.param, remote.media)
                part = image_part(body, part.offset, remote.param, part.kind)
            total += len(part.data)
            if total > MAX_REQUEST_IMAGE_BYTES:
                raise bad_request(
                    f"the request's images and videos are larger than {MAX_REQUEST_IMAGE_BYTES} bytes in all",
                    param=part.param or "messages",
                    code="invalid_image",
                )
            parts.append(part)
        messages.append(msgspec.structs.replace(message, images=parts) if message.images else message)
    return msgspec.structs.replace(request, messages=messages)


def _first(request: GenerateRequest, kind: str) -> ImagePart | None:
    """The first part of ``kind`` (``video``, ``audio``) in ``request``."""
    return next((p for m in request.messages or () for p in m.images or () if p.kind == kind), None)


def model_takes_images(backend: ModelBackend, model: str) -> bool:
    """Whether canonical ``model`` is known to take images (its kind is
    ``vision``)."""
    return any(info.name == model and info.kind == "vision" for info in backend.models())
