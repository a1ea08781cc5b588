"""OpenAI log-probability objects, from the worker's sampled tokens.

The worker reports :class:`~shared.protocol.TokenLogprob` lists (each
sampled token with its most likely alternatives). They are rendered here as
the chat ``{"content": [...], "refusal": null}`` object
(:func:`chat_logprobs`, also used by the Responses API for ``output_text``
log-probabilities) or as the legacy completions object ``{"tokens",
"token_logprobs", "top_logprobs", "text_offset"}``
(:func:`completion_logprobs`). A log-probability below ``-9999`` (or not
finite) is reported as ``-9999.0``, OpenAI's "very unlikely" value, so the
JSON never holds ``null`` there. Pure functions; any thread.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import msgspec

from shared.protocol import TokenLogprob

MIN_LOGPROB = -9999.0
"""The lowest log-probability reported (OpenAI's "very unlikely")."""


def _clamped(logprob: float) -> float:
    """``logprob``, or :data:`MIN_LOGPROB` when lower or not finite."""
    return logprob if MIN_LOGPROB <= logprob < math.inf else MIN_LOGPROB


class ChatTopLogprob(msgspec.Struct, kw_only=True):
    """One alternative of a chat token: text, log-probability, UTF-8 bytes."""

    token: str
    logprob: float
    bytes: list[int]


class ChatTokenLogprob(msgspec.Struct, kw_only=True):
    """A sampled chat token with its most likely alternatives."""

    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[ChatTopLogprob]


class ChatLogprobs(msgspec.Struct, kw_only=True):
    """A chat choice's ``logprobs`` (``refusal`` is always null)."""

    content: list[ChatTokenLogprob]
    refusal: None = None


def chat_logprobs(tokens: Iterable[TokenLogprob]) -> ChatLogprobs:
    """Return the chat ``logprobs`` object for these sampled tokens."""
    return ChatLogprobs(
        content=[
            ChatTokenLogprob(
                token=t.token,
                logprob=_clamped(t.logprob),
                bytes=list(t.raw),
                top_logprobs=[
                    ChatTopLogprob(token=a.token, logprob=_clamped(a.logprob), bytes=list(a.raw)) for a in t.top
                ],
            )
            for t in tokens
        ]
    )


class CompletionLogprobs(msgspec.Struct, kw_only=True):
    """A completions choice's legacy ``logprobs`` object.

    Parallel lists, one entry per sampled token: its text, log-probability,
    a ``{text: logprob}`` map of the alternatives (``top_logprobs`` is null
    when none were asked for) and the character offset where the token
    starts in the choice's text.
    """

    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None
    text_offset: list[int]


def _top_map(token: TokenLogprob, alternatives: int) -> dict[str, float]:
    """The legacy ``{text: logprob}`` map of one position: the ``alternatives``
    most likely tokens plus the sampled one (so up to ``alternatives + 1``
    entries, as OpenAI documents); on duplicate texts the likelier wins."""
    top: dict[str, float] = {}
    for alt in token.top[:alternatives]:
        top.setdefault(alt.token, _clamped(alt.logprob))
    top.setdefault(token.token, _clamped(token.logprob))
    return top


def completion_logprobs(
    tokens: Sequence[TokenLogprob], alternatives: int, offset: int = 0
) -> tuple[CompletionLogprobs, int]:
    """Return the legacy ``logprobs`` object for ``tokens`` and the offset
    after them.

    ``offset`` is where the first token starts in the choice's text; each
    next token starts after the previous token's text (token texts are the
    worker's per-token decoding, so offsets count their characters).
    ``alternatives`` 0 gives ``top_logprobs: null``.
    """
    offsets = []
    for t in tokens:
        offsets.append(offset)
        offset += len(t.token)
    tops = [_top_map(t, alternatives) for t in tokens] if alternatives > 0 else None
    result = CompletionLogprobs(
        tokens=[t.token for t in tokens],
        token_logprobs=[_clamped(t.logprob) for t in tokens],
        top_logprobs=tops,
        text_offset=offsets,
    )
    return result, offset
