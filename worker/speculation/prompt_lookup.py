"""Prompt-lookup (n-gram) drafting for speculative decoding.

A row's draft is the continuation of the most recent earlier occurrence of
its last ``ngram`` tokens in its own history (prompt and output so far):
coding agents re-emit large parts of what they were shown, and such a
draft costs no second model. The engine (see :mod:`worker.speculation.step`)
verifies every drafting row's draft in the batch's one forward pass and
keeps the longest prefix that matches what the row's own decoding picks
there, so output is unchanged.

:class:`Speculation` holds the settings, the per-row acceptance record
that turns drafting off for a row whose drafts keep failing, and the
drafted/accepted totals reported in ``/metrics``; and the speculative-
sampling acceptance rules (:func:`accept_deterministic`,
:func:`accept_from_draft_model`). Pure Python and NumPy; used on the
scheduler thread only (the totals are plain ints, read by other threads
under the GIL).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

ADAPTIVE_MIN_DRAFTED = 16
"""Draft tokens a row must have proposed before its rate is judged."""

ADAPTIVE_MIN_RATE = 0.25
"""A row whose accepted/drafted rate falls below this stops drafting for
:data:`ADAPTIVE_PAUSE_STEPS` steps."""

ADAPTIVE_PAUSE_STEPS = 32
"""Steps a row with a low acceptance rate decodes without drafting before
it is tried again with a fresh record (the text it copies may come later,
as when an answer re-emits a file after a sentence of its own)."""


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


@dataclass
class _RowRecord:
    drafted: int = 0
    accepted: int = 0
    opted_out: bool = False
    paused: int = 0


@dataclass
class Speculation:
    """Drafting settings of one model, per-row records and totals.

    ``tokens``: most draft tokens verified per step (k); ``ngram``: the
    longest suffix matched by prompt lookup; ``max_batch``: no row drafts
    in a step of a batch with more rows than this (verification stops
    paying once the batch already uses the weights it reads);
    ``draft_model``: a :class:`worker.speculation.draft_model.DraftModel` that drafts
    instead of prompt lookup (None: prompt lookup). ``drafted`` /
    ``accepted``: totals since load.
    """

    tokens: int = 8
    ngram: int = 3
    max_batch: int = 8
    draft_model: Any = None
    drafted: int = 0
    accepted: int = 0
    _rows: dict[int, _RowRecord] = field(default_factory=dict)

    def enabled_for(self, uid: int) -> bool:
        """Whether row ``uid`` drafts in this step: False when its request
        opted out (:meth:`opt_out`), and for :data:`ADAPTIVE_PAUSE_STEPS`
        calls once it has drafted enough tokens to be judged and accepted
        fewer than :data:`ADAPTIVE_MIN_RATE` of them (then its record starts
        afresh). Call once per step of the row."""
        record = self._rows.get(uid)
        if record is None:
            return True
        if record.opted_out:
            return False
        if record.paused:
            record.paused -= 1
            return False
        if record.drafted >= ADAPTIVE_MIN_DRAFTED and record.accepted < ADAPTIVE_MIN_RATE * record.drafted:
            record.paused, record.drafted, record.accepted = ADAPTIVE_PAUSE_STEPS - 1, 0, 0
            return False
        return True

    def record(self, uid: int, drafted: int, accepted: int) -> None:
        """Count one verification of row ``uid``."""
        row = self._rows.setdefault(uid, _RowRecord())
        row.drafted += drafted
        row.accepted += accepted
        self.drafted += drafted
        self.accepted += accepted

    def opt_out(self, uid: int) -> None:
        """Never draft for row ``uid`` (its request set ``speculative``
        false)."""
        self._rows.setdefault(uid, _RowRecord()).opted_out = True

    def draft(self, uid: int, history: list[int], limit: int) -> list[int]:
        """Row ``uid``'s draft after ``history`` (its tokens and pending
        token), at most ``limit`` tokens: the draft model's when there is
        one, else prompt lookup's (:func:`find_draft`)."""
        if self.draft_model is not None:
            return self.draft_model.draft(uid, history, limit)
        return find_draft(history, self.ngram, limit)

    def forget(self, uid: int) -> None:
        """Drop row ``uid``'s record, and its draft-model cache (it finished
        or was removed)."""
        self._rows.pop(uid, None)
        if self.draft_model is not None:
            self.draft_model.forget(uid)
