"""``POST /v1/audio/speech`` and ``GET /v1/audio/voices``: OpenAI's text to speech.

``POST /v1/audio/speech`` decodes the body (:mod:`gateway.speech.schema`),
resolves the model, submits one :class:`~shared.protocol.SpeechRequest` to
its worker through the :class:`~gateway.core.backend.ModelBackend` (which
refuses a model of another kind with a 400 naming both kinds) and waits for
the first output before any header, while watching the client
(:func:`gateway.frontend.request_flow.respond_after_first_output`; a client
that leaves aborts the request in the worker). Then, by ``stream_format``:

- absent: the whole file, ``Content-Type`` of the format
  (:data:`MEDIA_TYPES`);
- ``audio``: the file's bytes as each chunk is synthesised (chunked
  transfer, same content type). An error after the first bytes cannot
  change the status any more: the connection is cut (the client sees an
  incomplete body, never a file that looks whole);
- ``sse``: ``data:`` frames ``{"type": "speech.audio.delta", "audio":
  base64}`` per chunk and a last ``{"type": "speech.audio.done", "usage":
  {...}}`` (``input_tokens``: the input's phonemes; ``output_tokens``: 0,
  the model makes audio samples, not tokens; ``total_tokens`` their sum); an error after the start is an
  OpenAI error frame.

Errors before the answer starts are OpenAI error objects with the worker's
status (an unknown voice, ``instructions`` the model cannot follow, a format
whose encoder is missing: 400s naming the field).

``GET /v1/audio/voices`` lists the voices of every configured speech model
(``?model=`` narrows it to one) as OpenAI ``audio.voice`` objects (``type``
``audio_sample``: Kokoro's voice packs are made from recordings), plus
``model``, the model that has the voice. The voice files are read off the
event loop (:meth:`~gateway.core.backend.ModelBackend.model_files`).

Runs on the gateway's event loop; never blocks it.
"""

from __future__ import annotations

import base64
from typing import AsyncIterator, Literal

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from gateway.core.errors import APIError, bad_request, worker_error
from gateway.frontend import sse
from gateway.frontend.error_shapes import openai_error_frame, openai_error_response
from gateway.frontend.request_flow import (
    JSON_MEDIA_TYPE,
    backend_of,
    decode_and_submit,
    next_output,
    respond_after_first_output,
)
from gateway.speech.schema import decode_speech_request, to_speech_request
from shared.protocol import RequestOutput

MEDIA_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
"""The ``Content-Type`` of each ``response_format``."""

_encoder = msgspec.json.Encoder()


class SpeechStreamBroken(RuntimeError):
    """A streamed audio answer failed after its first bytes: raised out of
    the body so the connection is cut rather than ended as if whole."""


class SpeechUsage(msgspec.Struct, kw_only=True):
    """``speech.audio.done``'s usage (see the module docstring)."""

    input_tokens: int
    output_tokens: int
    total_tokens: int


class SpeechAudioDelta(msgspec.Struct, kw_only=True):
    """One chunk of audio in a ``sse`` stream (base64 of the format's bytes)."""

    type: Literal["speech.audio.delta"] = "speech.audio.delta"
    audio: str


class SpeechAudioDone(msgspec.Struct, kw_only=True):
    """The end of a ``sse`` stream, with its usage."""

    type: Literal["speech.audio.done"] = "speech.audio.done"
    usage: SpeechUsage


class VoiceEntry(msgspec.Struct, kw_only=True):
    """One voice of ``GET /v1/audio/voices`` (OpenAI's ``audio.voice``, plus ``model``)."""

    id: str
    object: Literal["audio.voice"] = "audio.voice"
    name: str
    created_at: int
    type: Literal["audio_sample"] = "audio_sample"
    model: str


class VoiceList(msgspec.Struct, kw_only=True):
    """The ``GET /v1/audio/voices`` answer."""

    object: Literal["list"] = "list"
    data: list[VoiceEntry]


async def create_speech(request: Request) -> Response:
    """``POST /v1/audio/speech``: audio, an audio stream, an SSE stream, or
    an OpenAI error with its status."""
    try:
        sent = await decode_and_submit(request, decode_speech_request, to_speech_request, "speech-")
    except APIError as err:
        return openai_error_response(err)
    body, stream, request_id = sent.body, sent.stream, sent.work.request_id
    media_type = MEDIA_TYPES[body.response_format]

    async def collect(first: RequestOutput) -> list[bytes] | RequestOutput:
        parts: list[bytes] = []
        output = first
        while True:
            if output.ends_request:
                return output
            if output.audio:
                parts.append(output.audio)
            if output.finish_reason is not None:
                return parts
            output = await next_output(stream, request_id)

    async def audio_frames(first: RequestOutput) -> AsyncIterator[bytes]:
        output = first
        while True:
            if output.ends_request:
                raise SpeechStreamBroken(f"speech request {request_id} failed mid-stream: {output.error}")
            if output.audio:
                yield output.audio
            if output.finish_reason is not None:
                return
            output = await next_output(stream, request_id)

    async def sse_frames(first: RequestOutput) -> AsyncIterator[bytes]:
        output = first
        while True:
            if output.ends_request:
                err = worker_error(output, "input")
                yield openai_error_frame(err.message, err.code, err.param)
                return
            if output.audio:
                yield sse.data_frame(_encoder.encode(SpeechAudioDelta(audio=base64.b64encode(output.audio).decode())))
            if output.finish_reason is not None:
                usage = SpeechUsage(
                    input_tokens=output.prompt_tokens,
                    output_tokens=output.completion_tokens,
                    total_tokens=output.prompt_tokens + output.completion_tokens,
                )
                yield sse.data_frame(_encoder.encode(SpeechAudioDone(usage=usage)))
                return
            output = await next_output(stream, request_id)

    streamed = {None: None, "audio": audio_frames, "sse": sse_frames}[body.stream_format]
    return await respond_after_first_output(
        request,
        stream,
        request_id,
        refuse=lambda output: openai_error_response(worker_error(output, "input")),
        streamed=streamed,
        collect=collect,
        answer=lambda parts: Response(b"".join(parts), media_type=media_type),
        keepalive=sse.KEEPALIVE if body.stream_format == "sse" else b"",
        media_type=sse.MEDIA_TYPE if body.stream_format == "sse" else media_type,
    )


async def list_voices(request: Request) -> Response:
    """``GET /v1/audio/voices``: the voices of the speech models (all, or
    the ``model`` query parameter's), or an OpenAI error."""
    backend = backend_of(request)
    try:
        wanted = request.query_params.get("model")
        infos = backend.models()
        if wanted is not None:
            name = backend.resolve(wanted)
            infos = [info for info in infos if info.name == name]
        files = await backend.model_files([info.name for info in infos])
        speech = [info for info in infos if files[info.name].kind == "speech"]
        if wanted is not None and not speech:
            raise bad_request(f"model '{wanted}' is not a speech model: it has no voices", "model", "wrong_model_kind")
    except APIError as err:
        return openai_error_response(err)
    entries = [
        VoiceEntry(id=voice, name=voice, created_at=info.created, model=info.name)
        for info in speech
        for voice in files[info.name].voices
    ]
    return Response(_encoder.encode(VoiceList(data=entries)), media_type=JSON_MEDIA_TYPE)
