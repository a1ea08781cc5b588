"""Prompt-lookup (n-gram) drafting for speculative decoding.

A row's draft is the continuation of the most recent earlier occurrence of
its last ``ngram`` tokens in its own history (prompt and output so far):
coding agents re-emit large parts of what they were shown, and such a
draft costs no second model. The engine (see :mod:`worker.batch_engine`)
verifies a draft with one forward pass and keeps the longest prefix that
matches what greedy decoding would have produced, so output is unchanged.

:class:`Speculation` holds the settings, the per-row acceptance record
that turns drafting off for a row whose drafts keep failing, and the
drafted/accepted totals reported in ``/metrics``. Pure Python; used on the
scheduler thread only (the totals are plain ints, read by other threads
under the GIL).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    """Up to ``limit`` tokens that followed the latest earlier occurrence of
    ``history``'s last ``ngram`` tokens (shorter suffixes are tried down to
    one token); empty when nothing matches or ``limit`` < 1."""
    if limit < 1:
        return []
    end = len(history)
    for n in range(min(ngram, end - 1), 0, -1):
        tail = history[end - n :]
        first = tail[0]
        # scan backwards so the most recent occurrence wins
        for start in range(end - n - 1, -1, -1):
            if history[start] == first and history[start : start + n] == tail:
                follow = history[start + n : start + n + limit]
                if follow:
                    return follow
    return []


@dataclass
class _RowRecord:
    drafted: int = 0
    accepted: int = 0
    opted_out: bool = False
    paused: int = 0


@dataclass
class Speculation:
    """Prompt-lookup settings of one model, per-row records and totals.

    ``tokens``: most draft tokens verified per step (k); ``ngram``: the
    longest suffix matched. ``drafted`` / ``accepted``: totals since load.
    """

    tokens: int = 8
    ngram: int = 3
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

    def forget(self, uid: int) -> None:
        """Drop row ``uid``'s record (it finished or was removed)."""
        self._rows.pop(uid, None)
