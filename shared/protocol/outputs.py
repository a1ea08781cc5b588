"""Worker -> gateway: what a request produces (part of the wire contract,
:mod:`shared.protocol`).

Every request is answered by :class:`RequestOutput` entries, carried in one
:class:`StepOutputs` per scheduler step; the rules of when an output ends a
choice or the whole request live here once
(:attr:`RequestOutput.ends_choice`, :attr:`RequestOutput.ends_request`,
:class:`OpenChoices`). A transcription's result is a :class:`Transcript`.
"""

from __future__ import annotations

from typing import Literal

import msgspec

FinishReason = Literal["stop", "length", "abort", "error", "tool_calls"]
"""Why a request ended: a stop token or string, the token limit, an abort
(client gone, shutdown), an error (see ``RequestOutput.error``), or the
model ended its turn with tool calls."""

ErrorKind = Literal["invalid_request", "context_length_exceeded", "overloaded", "unavailable", "internal", "timeout"]
"""Class of a request error; the gateway maps it to an HTTP status
(400, 400, 503, 503, 500, 504). ``unavailable`` is what the gateway itself
reports when a worker dies or stops answering mid-request; ``timeout`` means
the request ran past its deadline and was stopped."""


class TopLogprob(msgspec.Struct, frozen=True, array_like=True):
    """One candidate token: its id, text (lossy for partial UTF-8), ``raw``
    bytes and log-probability."""

    token_id: int
    token: str
    raw: bytes
    logprob: float


class TokenLogprob(msgspec.Struct, frozen=True, array_like=True):
    """A sampled token with its log-probability and the ``top`` most likely
    alternatives at that position (most likely first)."""

    token_id: int
    token: str
    raw: bytes
    logprob: float
    top: list[TopLogprob]


class ToolCallDelta(msgspec.Struct, frozen=True, kw_only=True):
    """A piece of the ``index``-th tool call of a choice.

    The first piece of a call carries its ``id`` and ``name``; every piece
    may carry more ``arguments`` text (the JSON object, in order).
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


class RequestOutput(msgspec.Struct, frozen=True, kw_only=True):
    """New output of one choice of one request in one scheduler step.

    ``index`` is the choice (0 .. n-1). ``text`` is the newly decoded text
    (may be empty while a multi-byte character or a possible stop string is
    held back). ``prompt_tokens``, ``cached_tokens`` (prompt tokens reused
    from the prefix cache) and ``completion_tokens`` (this choice's) are
    running totals. ``logprobs`` holds the tokens sampled in this step when
    the request asked for them. ``reasoning`` is new reasoning text (split
    out of the model's thinking markers) and ``tool_calls`` new pieces of
    tool calls; tool-call and reasoning markup never appears in ``text``.
    When ``finish_reason`` is ``stop``, ``length`` or ``tool_calls`` this
    choice is done; ``error`` or ``abort`` end the whole request (every
    choice): ``error`` holds a message safe to show the client,
    ``error_kind`` its class and ``error_param`` (None: not one field) the
    request field at fault, in the worker's terms (``prompt``,
    ``logit_bias``, ``response_format``, ``tools``, ...). ``stop_sequence`` names the stop string that
    ended the choice, if one did. ``queue_seconds`` (on a request's first
    output) is how long it waited in the worker before the engine took it.
    ``disk_cached_tokens``: the part of ``cached_tokens`` loaded from the
    prefix cache's disk tier.
    ``accepted_prediction_tokens`` / ``rejected_prediction_tokens``: this
    choice's speculative draft tokens that verification kept / threw away
    (running totals, as ``completion_tokens``; accepted ones are part of
    ``completion_tokens``, rejected ones are not).
    An :class:`EmbedRequest` is answered by one output with
    ``finish_reason="stop"``, ``prompt_tokens`` the tokens of all its
    inputs, and ``embeddings`` its vectors: little-endian float32,
    row-major, ``embedding_dim`` values per input, in input order.
    A :class:`RerankRequest` is answered likewise, with ``scores`` holding
    each document's relevance score in document order (``prompt_tokens``:
    the tokens of every pair).
    A :class:`SpeechRequest` is answered by outputs whose ``audio`` holds
    the next bytes of the encoded audio (a streamed request: one output per
    synthesised chunk, the bytes in order make the file; otherwise the whole
    file in the terminal output) and ``audio_seconds`` the seconds of audio
    those bytes add; ``prompt_tokens`` is the input's phoneme count and
    ``completion_tokens`` 0 (the model makes samples, not tokens).
    A :class:`TranscribeRequest` gets one output per decoded 30-second
    window with that window's new ``text`` (may be empty), then one
    ``finish_reason="stop"`` output holding the whole ``transcript``.
    """

    request_id: str
    text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: FinishReason | None = None
    error: str | None = None
    error_kind: ErrorKind | None = None
    error_param: str | None = None
    index: int = 0
    cached_tokens: int = 0
    logprobs: list[TokenLogprob] | None = None
    reasoning: str = ""
    tool_calls: list[ToolCallDelta] | None = None
    stop_sequence: str | None = None
    queue_seconds: float | None = None
    disk_cached_tokens: int = 0
    embeddings: bytes | None = None
    embedding_dim: int = 0
    scores: list[float] | None = None
    audio: bytes | None = None
    audio_seconds: float = 0.0
    transcript: Transcript | None = None
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0

    @property
    def ends_choice(self) -> bool:
        """Whether this output ends its own choice only (finish reason in
        :data:`CHOICE_END_REASONS`); the request's other choices go on."""
        return self.finish_reason in CHOICE_END_REASONS

    @property
    def ends_request(self) -> bool:
        """Whether this output ends the whole request, every choice at once
        (finish reason in :data:`REQUEST_END_REASONS`)."""
        return self.finish_reason in REQUEST_END_REASONS


CHOICE_END_REASONS: frozenset[str] = frozenset(("stop", "length", "tool_calls"))
"""Finish reasons that end one choice (and only that choice)."""

REQUEST_END_REASONS: frozenset[str] = frozenset(("error", "abort"))
"""Finish reasons that end every choice of a request at once."""


class OpenChoices:
    """The one count of a request's choices still waiting for their end.

    Built with the request's ``n`` (below 1 counts as 1); :meth:`close` is fed every output of the
    request in order and says how many choices that output ended (one for a
    choice's end, all still open for an error/abort, none otherwise).
    :attr:`open` is what is left; the request is over when it reaches 0.
    Not thread-safe: one owner (an event loop or one thread) feeds it.
    """

    __slots__ = ("open",)

    def __init__(self, n: int) -> None:
        self.open = max(1, n)

    def close(self, output: RequestOutput) -> int:
        """Count ``output``'s end; return how many choices it ended (0 when
        it ends none or the request was already over)."""
        if output.finish_reason is None or self.open == 0:
            return 0
        ended = self.open if output.ends_request else 1
        self.open -= ended
        return ended

    def close_all(self) -> int:
        """End every open choice at once (the request was given up); return
        how many were still open."""
        ended, self.open = self.open, 0
        return ended

    @property
    def done(self) -> bool:
        """Whether no choice is open any more."""
        return self.open == 0


class StepOutputs(msgspec.Struct, frozen=True, kw_only=True, tag="step"):
    """Every request's new output from one scheduler step, in one message."""

    step: int
    outputs: list[RequestOutput]


class TranscriptWord(msgspec.Struct, frozen=True, kw_only=True):
    """One word of a transcript: its text and where it is spoken (seconds)."""

    word: str
    start: float
    end: float


class TranscriptSegment(msgspec.Struct, frozen=True, kw_only=True):
    """One segment of a transcript, in the shape of OpenAI's ``verbose_json``
    segment; ``words`` is empty unless word timestamps were asked for."""

    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    words: list[TranscriptWord] = []


class Transcript(msgspec.Struct, frozen=True, kw_only=True):
    """A finished transcription: the whole ``text``, the spoken ``language``
    (its English name in lower case, e.g. ``english``), the audio's
    ``duration`` in seconds and its ``segments``."""

    text: str
    language: str
    duration: float
    segments: list[TranscriptSegment] = []
