"""One model's speculative decoding: its drafter, records and totals.

:class:`Speculation` is what the engine's speculative step
(:mod:`worker.speculation.step`) asks, each step, which rows draft and for
their drafts, and tells what verification accepted. It drafts with one of:

* ``suffix`` (the default ``auto`` mode): a per-model
  :class:`~worker.speculation.suffix_index.TokenIndex` over the running
  rows' own histories (prompt and output so far) and the sequences of
  earlier requests (their prompts and outputs), bounded in tokens and
  scoped per API key name: a row drafts what followed the longest match
  of its last tokens there, in its own text or an earlier request's;
* ``prompt_lookup``: the row's own history only
  (:func:`worker.speculation.prompt_lookup.find_draft`);
* a draft model (:class:`worker.speculation.draft_model.DraftModel`).

With a :class:`~worker.speculation.controller.DraftController` (how a
worker builds it, see :func:`worker.model_setup.speculation_for`) rows draft
only while it pays and draft lengths follow each row's acceptance; without
one every eligible row drafts ``tokens`` tokens each step (what the
exactness tests want: every path taken, deterministically).

The totals (``drafted`` / ``accepted``) are plain ints read by other
threads under the GIL; per-step records (:meth:`Speculation.take_records`)
let the scheduler credit each request its own counts. Used on the
scheduler thread only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from worker.speculation.controller import DraftController
from worker.speculation.prompt_lookup import find_draft
from worker.speculation.suffix_index import TokenIndex

SUFFIX_ORDERS = (6, 2)
"""The n-gram lengths the suffix index keys on, longest first."""


@dataclass
class _RowRecord:
    seq: int
    scope: str = ""
    opted_out: bool = False


@dataclass
class Speculation:
    """Drafting settings of one model, per-row records and totals.

    ``tokens``: most draft tokens verified per step (k); ``ngram``: the
    longest suffix matched by prompt lookup; ``max_batch``: no row drafts
    in a step of a batch with more rows than this; ``draft_model``: a
    :class:`~worker.speculation.draft_model.DraftModel` that drafts (None:
    the index or prompt lookup); ``index``: the suffix drafter's
    :class:`~worker.speculation.suffix_index.TokenIndex` (None: prompt
    lookup); ``controller``: when rows draft and how much (None: always,
    ``tokens``). ``method``: what drafts, as reported (``suffix``,
    ``prompt_lookup`` or ``draft:<source>``). ``drafted`` / ``accepted``:
    totals since load.
    """

    tokens: int = 8
    ngram: int = 3
    max_batch: int = 32
    draft_model: Any = None
    index: TokenIndex | None = None
    controller: DraftController | None = None
    method: str = "prompt_lookup"
    drafted: int = 0
    accepted: int = 0
    _rows: dict[int, _RowRecord] = field(default_factory=dict)
    _sequences: int = 0
    _step_records: list[tuple[int, int, int]] = field(default_factory=list)

    def begin(self, uid: int, scope: str = "", speculative: bool = True) -> None:
        """Row ``uid`` joined: its sequences are matched within ``scope``
        (an API key's name; ``""``: none), and it never drafts when
        ``speculative`` is false (its request opted out)."""
        self._sequences += 1
        self._rows[uid] = _RowRecord(self._sequences, scope, not speculative)

    def _record(self, uid: int) -> _RowRecord:
        """Row ``uid``'s record (a row never begun gets one, scope ``""``).
        Its sequence id in the index is its own, never reused: engine
        uids start over when the scheduler makes a new engine."""
        record = self._rows.get(uid)
        if record is None:
            self.begin(uid)
            record = self._rows[uid]
        return record

    def opt_out(self, uid: int) -> None:
        """Never draft for row ``uid`` (its request set ``speculative``
        false)."""
        self._record(uid).opted_out = True

    def tick(self) -> None:
        """A speculative step is being considered (once per engine step)."""
        if self.controller is not None:
            self.controller.tick()

    def enabled_for(self, uid: int) -> bool:
        """Whether row ``uid`` may draft in this step: not when its request
        opted out, nor while the controller has it switched off."""
        record = self._rows.get(uid)
        if record is not None and record.opted_out:
            return False
        return self.controller is None or self.controller.wants(uid)

    def pays(self, rows: int, drafting: list[int]) -> bool:
        """Whether a batch of ``rows`` rows where ``drafting`` may draft
        should speculate this step (always, without a controller)."""
        return self.controller is None or self.controller.pays(rows, drafting)

    def limit(self, uid: int) -> int:
        """Row ``uid``'s draft length this step."""
        return self.tokens if self.controller is None else self.controller.limit(uid)

    def draft(self, uid: int, history: list[int], limit: int) -> list[int]:
        """Row ``uid``'s draft after ``history`` (its tokens and pending
        token), at most ``limit`` tokens: the draft model's, the suffix
        index's, or prompt lookup's."""
        if self.draft_model is not None:
            return self.draft_model.draft(uid, history, limit)
        if self.index is not None:
            record = self._record(uid)
            self._index_history(record, history)
            return self.index.match(history, limit, record.scope)[1]
        return find_draft(history, self.ngram, limit)

    def _index_history(self, record: _RowRecord, history: list[int]) -> None:
        """Bring the row's sequence in the index up to ``history``."""
        index = self.index
        assert index is not None
        held = len(index.sequence(record.seq)) if record.seq in index else 0
        if held > len(history):  # cannot happen: histories only grow
            index.drop(record.seq)
            held = 0
        if held < len(history):
            index.extend(record.seq, history[held:], record.scope)

    def record(self, uid: int, drafted: int, accepted: int) -> None:
        """Count one verification of row ``uid`` (``drafted`` 0: it was asked
        and found no draft)."""
        self.drafted += drafted
        self.accepted += accepted
        if drafted:
            self._step_records.append((uid, drafted, accepted))
        if self.controller is not None:
            self.controller.observe(uid, drafted, accepted)

    def timed_step(self, rows: int, speculative: bool, seconds: float) -> None:
        """Record one engine step's wall time (see
        :meth:`DraftController.timed_step`)."""
        if self.controller is not None:
            self.controller.timed_step(rows, speculative, seconds)

    def take_records(self) -> list[tuple[int, int, int]]:
        """The ``(uid, drafted, accepted)`` verifications since the last
        call, oldest first."""
        records, self._step_records = self._step_records, []
        return records

    def forget(self, uid: int, tokens: list[int] | None = None) -> None:
        """Row ``uid`` finished or was removed: drop its records and its
        draft-model cache; its sequence in the index (brought up to
        ``tokens``, its prompt and output, when given) stays as an earlier
        request's."""
        record = self._rows.pop(uid, None)
        if self.controller is not None:
            self.controller.forget(uid)
        if self.draft_model is not None:
            self.draft_model.forget(uid)
        if self.index is not None and record is not None:
            if tokens:
                self._index_history(record, list(tokens))
            self.index.settle(record.seq)

    @property
    def idle(self) -> bool:
        """Whether no row has a record left (every row was forgotten)."""
        live = self.controller is not None and bool(self.controller._rows)
        return not self._rows and not live
