"""Request body of ``POST /v1/audio/speech`` (OpenAI's text-to-speech API).

Decoding is strict, as for the other OpenAI bodies
(:func:`gateway.frontend.validation.decode_body`): unknown fields are
refused by name, nothing is coerced. Fields:

- ``model`` (required): a configured speech model or alias.
- ``input`` (required): the text, 1 to :data:`MAX_INPUT_CHARS` characters
  (OpenAI's limit).
- ``voice`` (required): one of the model's voices (``GET /v1/audio/voices``)
  as a string or as ``{"id": "..."}``; a comma-separated list blends voices
  (the mean of their style packs). An unknown voice is a 400 from the worker
  naming the model's voices.
- ``instructions``: how to speak. Honoured only by models with an input for
  it; the Kokoro family has none, so a non-empty ``instructions`` is a 400
  naming the field (an empty string counts as absent).
- ``response_format``: ``mp3`` (default), ``opus``, ``aac``, ``flac``,
  ``wav`` or ``pcm`` (16-bit little-endian samples at the model's rate, no
  header). A format whose encoder the machine lacks (``aac`` without the
  ``ffmpeg`` program) is a 400 naming what is missing.
- ``speed``: 0.25 to 4.0 (default 1), the model's speaking rate.
- ``stream_format``: absent, the whole file in one answer (exact container
  headers); ``audio``, the file's bytes streamed as each chunk (sentence) is
  synthesised; ``sse``, Server-Sent Events ``speech.audio.delta`` (base64
  audio of the format) and a final ``speech.audio.done`` with ``usage``.

Every refusal is an :class:`~gateway.core.errors.APIError` 400 naming the
field. :func:`to_speech_request` builds the worker's
:class:`~shared.protocol.SpeechRequest`.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

import msgspec
from msgspec import Meta

from gateway.frontend.validation import MAX_NAME_CHARS, ModelName, decode_body
from shared.protocol import SpeechRequest

MAX_INPUT_CHARS = 4096
"""Most characters of ``input`` (OpenAI's limit)."""

MAX_INSTRUCTIONS_CHARS = 4096
"""Most characters of ``instructions``."""

MAX_VOICE_CHARS = 4 * MAX_NAME_CHARS
"""Most characters of ``voice`` (room for a blend of several names)."""

ResponseFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]
"""OpenAI's ``response_format`` values."""


class VoiceID(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A voice given as an object (OpenAI's custom-voice reference)."""

    id: Annotated[str, Meta(min_length=1, max_length=MAX_VOICE_CHARS)]


class SpeechBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A decoded ``POST /v1/audio/speech`` body (see the module docstring)."""

    model: ModelName
    input: Annotated[str, Meta(min_length=1, max_length=MAX_INPUT_CHARS)]
    voice: Union[Annotated[str, Meta(min_length=1, max_length=MAX_VOICE_CHARS)], VoiceID]
    instructions: Annotated[str, Meta(max_length=MAX_INSTRUCTIONS_CHARS)] | None = None
    response_format: ResponseFormat = "mp3"
    speed: Annotated[float, Meta(ge=0.25, le=4.0)] = 1.0
    stream_format: Literal["sse", "audio"] | None = None

    @property
    def voice_name(self) -> str:
        """The voice as a name, whichever way it was given."""
        return self.voice.id if isinstance(self.voice, VoiceID) else self.voice


_decoder = msgspec.json.Decoder(SpeechBody)


def decode_speech_request(body: bytes) -> SpeechBody:
    """Decode and check a ``POST /v1/audio/speech`` body.

    Raises:
        gateway.core.errors.APIError: 400 naming the field at fault.
    """
    return decode_body(_decoder, body)


def to_speech_request(body: SpeechBody, request_id: str) -> SpeechRequest:
    """The worker request for ``body`` (streamed unless ``stream_format`` is absent)."""
    return SpeechRequest(
        request_id=request_id,
        input=body.input,
        voice=body.voice_name,
        response_format=body.response_format,
        speed=body.speed,
        instructions=body.instructions or None,
        stream=body.stream_format is not None,
    )
