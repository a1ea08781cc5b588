"""Gateway -> worker: the requests of the kinds that do not generate (part
of the wire contract, :mod:`shared.protocol`): :class:`EmbedRequest`
(embedding workers), :class:`RerankRequest` (rerank workers),
:class:`SpeechRequest` (speech workers) and :class:`TranscribeRequest`
(transcription workers). Each is answered like a generation, with
:class:`~shared.protocol.outputs.RequestOutput` entries (one result).
"""

from __future__ import annotations

from typing import Literal

import msgspec


class EmbedRequest(msgspec.Struct, frozen=True, kw_only=True, tag="embed"):
    """Embed a batch of inputs with an embedding worker.

    Exactly one of ``texts`` (each tokenized with the model's tokenizer and
    its special tokens) or ``token_ids`` (each list taken as the text's
    tokens; the model's special tokens are added around it) is set and
    non-empty. An input longer than the model's limit fails the request
    with ``context_length_exceeded`` unless ``truncate`` is true (then it
    is cut to the limit, keeping its start). ``dimensions`` (None: the
    model's own) shortens every vector, renormalized when the model
    normalizes, where the model's config allows it. ``timeout`` as for
    :class:`GenerateRequest`. Answered by exactly one terminal
    :class:`RequestOutput` (see there); aborted like a generation.
    """

    request_id: str
    texts: list[str] | None = None
    token_ids: list[list[int]] | None = None
    truncate: bool = False
    dimensions: int | None = None
    timeout: float | None = None

    @property
    def n(self) -> int:
        """An embedding request has one result (one terminal output)."""
        return 1


class RerankRequest(msgspec.Struct, frozen=True, kw_only=True, tag="rerank"):
    """Score ``documents`` against ``query`` with a rerank (cross-encoder)
    worker: each document is paired with the query and the pair scored.

    ``documents`` is non-empty and no text is empty. A pair longer than the
    model's limit fails the request with ``context_length_exceeded``
    unless ``truncate`` is true (then the document is cut, keeping its
    start; a query that leaves no room for any document text still fails).
    ``timeout`` as for :class:`GenerateRequest`. Answered by exactly one
    terminal :class:`RequestOutput` (``scores`` in document order; sorting
    and ``top_n`` are the gateway's); aborted like a generation.
    """

    request_id: str
    query: str
    documents: list[str]
    truncate: bool = False
    timeout: float | None = None

    @property
    def n(self) -> int:
        """A rerank request has one result (one terminal output)."""
        return 1


class SpeechRequest(msgspec.Struct, frozen=True, kw_only=True, tag="speech"):
    """Synthesise speech with a speech worker.

    ``input`` is the text, ``voice`` one of the model's voices,
    ``response_format`` the container or raw encoding (``mp3``, ``opus``,
    ``aac``, ``flac``, ``wav``, ``pcm``), ``speed`` the speaking rate
    (1: the model's own), ``instructions`` how to speak (None: none; a
    model that cannot follow them refuses the request). ``stream``: send
    the audio as it is synthesised, chunk by chunk, in a byte stream that
    is a valid file when concatenated (else one terminal output holds the
    whole file). ``timeout`` as for :class:`GenerateRequest`. Answered as
    :class:`RequestOutput` says; aborted like a generation.
    """

    request_id: str
    input: str
    voice: str
    response_format: str = "mp3"
    speed: float = 1.0
    instructions: str | None = None
    stream: bool = False
    timeout: float | None = None

    @property
    def n(self) -> int:
        """A speech request has one result (one terminal output)."""
        return 1


class TranscribeRequest(msgspec.Struct, frozen=True, kw_only=True, tag="transcribe"):
    """Transcribe (``task`` ``transcribe``) or translate into English
    (``translate``) one uploaded audio file with a transcription worker.

    ``audio`` is the file's bytes (decoded by the worker; an unknown,
    corrupt, empty or too long file fails the request with
    ``invalid_request`` naming the reason). ``language`` (ISO-639-1, None:
    detected), ``prompt`` (text that prompts the first window),
    ``temperature`` (0: greedy with the fallback to higher temperatures),
    ``words``: word timestamps. ``timeout`` as for :class:`GenerateRequest`.
    Answered by window outputs and one terminal :class:`RequestOutput`
    (see there); aborted like a generation.
    """

    request_id: str
    audio: bytes
    task: Literal["transcribe", "translate"] = "transcribe"
    language: str | None = None
    prompt: str | None = None
    temperature: float = 0.0
    words: bool = False
    timeout: float | None = None

    @property
    def n(self) -> int:
        """A transcription has one result (one terminal output)."""
        return 1
