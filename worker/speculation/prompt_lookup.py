"""Prompt-lookup (n-gram) drafting for speculative decoding.

A row's draft is the continuation of the most recent earlier occurrence of
its last ``ngram`` tokens in its own history (prompt and output so far):
coding agents re-emit large parts of what they were shown, and such a
draft costs no second model. The engine (see :mod:`worker.speculation.step`)
verifies every drafting row's draft in the batch's one forward pass and
keeps the longest prefix that matches what the row's own decoding picks
there, so output is unchanged.

Also here: the speculative-sampling acceptance rules
(:func:`accept_deterministic`, :func:`verify_draft`,
:func:`accept_from_draft_model`), which every drafter's drafts go
through. The drafting settings and records of a model live in
:mod:`worker.speculation.drafting`. Pure Python and NumPy; used on the
scheduler thread only.
"""

from __future__ import annotations

from typing import Callable

import numpy as np


def find_draft(history: list[int], ngram: int, limit: int) -> list[int]:
    """Up to ``limit`` tokens that followed an earlier occurrence of
    ``history``'s last ``ngram`` tokens (shorter suffixes are tried down to
    one token); empty when nothing matches or ``limit`` < 1.

    The most recent occurrence with ``limit`` tokens after it wins; when
    none has that many (the latest occurrences run into the end of the
    history, as in a loop of one repeated phrase), the one with the
    longest continuation, the more recent on a tie."""
    if limit < 1:
        return []
    end = len(history)
    for n in range(min(ngram, end - 1), 0, -1):
        tail = history[end - n :]
        first = tail[0]
        best: list[int] = []
        # scan backwards so the most recent occurrence wins
        for start in range(end - n - 1, -1, -1):
            if history[start] == first and history[start : start + n] == tail:
                follow = history[start + n : start + n + limit]
                if len(follow) == limit:
                    return follow
                if len(follow) > len(best):
                    best = follow
        if best:
            return best
    return []


def accept_deterministic(p: np.ndarray, drafted: int, rng: np.random.Generator) -> int:
    """The speculative-sampling rule for a deterministic draft (prompt
    lookup proposes ``drafted`` with certainty): accept it with probability
    ``p[drafted]``, else draw from ``p`` with ``drafted`` removed and
    renormalized. ``p``: the target's processed distribution (1-D,
    summing to 1). Returns the emitted token (``drafted`` when accepted);
    the emitted token is distributed exactly as ``p``.

    The engine applies the same rule in the equivalent form "draw ``y``
    from ``p``; accept when ``y`` equals the draft, else emit ``y``" (one
    draw per position, as plain decoding, see
    :mod:`worker.speculation.step`)."""
    if rng.random() < p[drafted]:
        return drafted
    rest = p.astype(np.float64, copy=True)
    rest[drafted] = 0.0
    return int(rng.choice(rest.shape[0], p=rest / rest.sum()))


def verify_draft(draft: list[int], pick: Callable[[int], int]) -> tuple[int, int]:
    """Verify a deterministic ``draft`` position by position: ``pick(j)``
    is the token the row's own decoding picks at position ``j`` (after the
    pending token and ``draft[:j]``: an arg-max, or one draw from the
    row's sampler). Stops at the first position whose pick differs from
    the draft, so ``pick`` is called exactly once per emitted token.
    Returns how many draft tokens were accepted and the pick after them.

    For a sampled row this is :func:`accept_deterministic` in its
    draw-and-compare form: the pick equals ``draft[j]`` with probability
    ``p(draft[j])``, and otherwise is a draw from ``p`` without it."""
    for j, token in enumerate(draft):
        picked = pick(j)
        if picked != token:
            return j, picked
    return len(draft), pick(len(draft))


def accept_from_draft_model(p: np.ndarray, q: np.ndarray, drafted: int, rng: np.random.Generator) -> int:
    """The speculative-sampling rule for a draft drawn from a draft
    model's distribution ``q``: accept ``drafted`` with probability
    ``min(1, p/q)``, else draw from ``max(0, p - q)`` renormalized.
    Returns the emitted token, distributed exactly as ``p`` when
    ``drafted`` was drawn from ``q``."""
    if rng.random() * q[drafted] < p[drafted]:
        return drafted
    rest = np.maximum(p.astype(np.float64) - q, 0.0)
    return int(rng.choice(rest.shape[0], p=rest / rest.sum()))
