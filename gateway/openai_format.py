"""OpenAI response objects and stream chunks, as bytes.

Whole responses (``chat.completion``, ``text_completion``, model objects)
are msgspec Structs encoded in one call. Stream chunks are on the per-token
path, so :class:`ChatChunkStream` and :class:`CompletionChunkStream` build,
once per request, the constant bytes around a chunk's only variable part and
then emit each frame as ``head + json(text) + tail``. Every frame they emit is
a complete SSE ``data:`` frame (see :mod:`gateway.sse`); the JSON inside is
byte-for-byte what encoding the equivalent object would give.
"""

from __future__ import annotations

from typing import Iterable, Literal

import msgspec

from gateway.engine_api import ModelInfo
from gateway.sse import DATA_PREFIX, FRAME_END

OWNED_BY = "mlxd"
"""The ``owned_by`` of every model object."""

FinalReason = Literal["stop", "length"]
"""Finish reasons a successful choice can carry."""

_encoder = msgspec.json.Encoder()


def encode(obj: object) -> bytes:
    """Return ``obj`` as compact JSON bytes (msgspec)."""
    return _encoder.encode(obj)


class Usage(msgspec.Struct, kw_only=True):
    """Token counts of one request; ``total_tokens`` is their sum."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


def usage(prompt_tokens: int, completion_tokens: int) -> Usage:
    """Return the usage object for these counts."""
    return Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
    )


class AssistantMessage(msgspec.Struct, kw_only=True):
    """The ``message`` of a chat choice (``refusal`` is always null)."""

    role: str = "assistant"
    content: str
    refusal: None = None


class ChatChoice(msgspec.Struct, kw_only=True):
    """One choice of a ``chat.completion``."""

    index: int = 0
    message: AssistantMessage
    logprobs: None = None
    finish_reason: str


class ChatCompletion(msgspec.Struct, kw_only=True):
    """A complete, non-streamed ``chat.completion`` object."""

    id: str
    object: str = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class CompletionChoice(msgspec.Struct, kw_only=True):
    """One choice of a ``text_completion``."""

    text: str
    index: int = 0
    logprobs: None = None
    finish_reason: str | None


class TextCompletion(msgspec.Struct, kw_only=True):
    """A complete, non-streamed ``text_completion`` object."""

    id: str
    object: str = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class ModelCard(msgspec.Struct, kw_only=True):
    """One entry of ``GET /v1/models`` (and ``GET /v1/models/{id}``)."""

    id: str
    object: str = "model"
    created: int
    owned_by: str = OWNED_BY


class ModelList(msgspec.Struct, kw_only=True):
    """The ``GET /v1/models`` body."""

    object: str = "list"
    data: list[ModelCard]


def chat_completion_body(
    *,
    request_id: str,
    created: int,
    model: str,
    text: str,
    finish_reason: FinalReason,
    prompt_tokens: int,
    completion_tokens: int,
) -> bytes:
    """Return the JSON of a one-choice ``chat.completion`` with usage."""
    choice = ChatChoice(message=AssistantMessage(content=text), finish_reason=finish_reason)
    return encode(
        ChatCompletion(
            id=request_id,
            created=created,
            model=model,
            choices=[choice],
            usage=usage(prompt_tokens, completion_tokens),
        )
    )


def text_completion_body(
    *,
    request_id: str,
    created: int,
    model: str,
    text: str,
    finish_reason: FinalReason,
    prompt_tokens: int,
    completion_tokens: int,
) -> bytes:
    """Return the JSON of a one-choice ``text_completion`` with usage."""
    choice = CompletionChoice(text=text, finish_reason=finish_reason)
    return encode(
        TextCompletion(
            id=request_id,
            created=created,
            model=model,
            choices=[choice],
            usage=usage(prompt_tokens, completion_tokens),
        )
    )


def model_card(info: ModelInfo) -> ModelCard:
    """Return the OpenAI model object for a configured model."""
    return ModelCard(id=info.name, created=info.created)


def model_body(info: ModelInfo) -> bytes:
    """Return the JSON of one model object."""
    return encode(model_card(info))


def model_list_body(infos: Iterable[ModelInfo]) -> bytes:
    """Return the JSON of the model list (canonical names only, in order)."""
    return encode(ModelList(data=[model_card(info) for info in infos]))


def error_frame(message: str, code: str | None, param: str | None = None) -> bytes:
    """Return an SSE frame carrying an OpenAI mid-stream error.

    The payload is ``{"error": {"message", "type": "server_error", "param",
    "code"}}``; the OpenAI SDKs raise ``APIError`` when they read it.
    """
    body = {"error": {"message": message, "type": "server_error", "param": param, "code": code}}
    return DATA_PREFIX + encode(body) + FRAME_END


def _head(request_id: str, obj: str, created: int, model: str) -> bytes:
    """The constant start of every chunk of one stream, up to ``"choices":``."""
    return b"".join(
        (
            b'{"id":',
            encode(request_id),
            b',"object":',
            encode(obj),
            b',"created":',
            encode(created),
            b',"model":',
            encode(model),
            b',"choices":',
        )
    )


class _ChunkStream:
    """Shared part of the two chunk builders: the constant head and the
    usage chunk. ``include_usage`` adds ``"usage":null`` to every chunk and
    makes :meth:`finish` end with a usage chunk (``choices: []``)."""

    _object = ""

    def __init__(self, request_id: str, created: int, model: str, include_usage: bool) -> None:
        self._head = DATA_PREFIX + _head(request_id, self._object, created, model)
        self._end = (b',"usage":null}' if include_usage else b"}") + FRAME_END
        self._include_usage = include_usage

    def usage(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        """Return the final usage chunk frame (``choices: []``)."""
        counts = encode(usage(prompt_tokens, completion_tokens))
        return self._head + b'[],"usage":' + counts + b"}" + FRAME_END

    def _usage_if_asked(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        """The usage frame when ``include_usage`` was set, else nothing."""
        return self.usage(prompt_tokens, completion_tokens) if self._include_usage else b""


class ChatChunkStream(_ChunkStream):
    """Builds the ``chat.completion.chunk`` frames of one streamed response.

    Built from the response ``request_id``, ``created`` timestamp, ``model``
    and whether ``include_usage`` was requested. Order of use: :meth:`start`
    once, :meth:`text` per piece of text, :meth:`finish` once. Every method
    returns complete SSE frames.
    """

    _object = "chat.completion.chunk"

    def __init__(self, request_id: str, created: int, model: str, include_usage: bool) -> None:
        super().__init__(request_id, created, model, include_usage)
        self._text_head = self._head + b'[{"index":0,"delta":{"content":'
        self._text_tail = b'},"finish_reason":null}]' + self._end

    def start(self) -> bytes:
        """Return the first chunk: ``delta: {"role": "assistant", "content": ""}``."""
        return self._head + b'[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]' + self._end

    def text(self, text: str) -> bytes:
        """Return a chunk with ``delta: {"content": text}``."""
        return self._text_head + encode(text) + self._text_tail

    def finish(
        self, reason: FinalReason, text: str, prompt_tokens: int, completion_tokens: int
    ) -> bytes:
        """Return the closing frames: a content chunk for ``text`` if it is
        non-empty, the ``delta: {}`` chunk with ``finish_reason``, then the
        usage chunk when ``include_usage`` was set."""
        content = self.text(text) if text else b""
        final = self._head + b'[{"index":0,"delta":{},"finish_reason":' + encode(reason) + b"}]" + self._end
        return content + final + self._usage_if_asked(prompt_tokens, completion_tokens)


class CompletionChunkStream(_ChunkStream):
    """Builds the ``text_completion`` chunk frames of one streamed response.

    Same interface as :class:`ChatChunkStream`; :meth:`start` is empty and
    the last text travels in the same chunk as ``finish_reason``.
    """

    _object = "text_completion"

    def __init__(self, request_id: str, created: int, model: str, include_usage: bool) -> None:
        super().__init__(request_id, created, model, include_usage)
        self._text_head = self._head + b'[{"text":'
        self._text_tail = b',"index":0,"logprobs":null,"finish_reason":null}]' + self._end

    def start(self) -> bytes:
        """Return nothing: completions streams have no opening chunk."""
        return b""

    def text(self, text: str) -> bytes:
        """Return a chunk carrying ``text``."""
        return self._text_head + encode(text) + self._text_tail

    def finish(
        self, reason: FinalReason, text: str, prompt_tokens: int, completion_tokens: int
    ) -> bytes:
        """Return a chunk with the last ``text`` (maybe empty) and
        ``finish_reason``, then the usage chunk when ``include_usage`` was set."""
        final = b"".join(
            (
                self._text_head,
                encode(text),
                b',"index":0,"logprobs":null,"finish_reason":',
                encode(reason),
                b"}]",
                self._end,
            )
        )
        return final + self._usage_if_asked(prompt_tokens, completion_tokens)
