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
worker builds it, see :func:`worker.model_setup.speculation_for`) a step
speculates only when its cost model expects it to pay, at the grid width
and with the rows it expects to pay most; without one every eligible row
drafts ``tokens`` tokens each step (what the exactness tests want: every
path taken, deterministically).

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
    steps: dict[str, int] = field(default_factory=dict)
    _rows: dict[int, _RowRecord] = field(default_factory=dict)
    _sequences: int = 0
    _step_records: list[tuple[int, int, int]] = field(default_factory=list)
    _everyone: set[int] = field(default_factory=set)

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

    def start_step(self, rows: int) -> None:
        """A generation step of ``rows`` rows starts (once per engine step,
        speculative or not)."""
        if self.controller is not None:
            self.controller.start_step(rows)

    def pause(self) -> None:
        """The engine has nothing left to run (scheduler thread, each idle
        loop turn): the step in progress ends now (see
        :meth:`~worker.speculation.controller.DraftController.pause`)."""
        if self.controller is not None:
            self.controller.pause()

    def enabled_for(self, uid: int) -> bool:
        """Whether row ``uid`` may draft at all: not when its request opted
        out."""
        record = self._rows.get(uid)
        return record is None or not record.opted_out

    def plan(self, rows: int, eligible: list[int]) -> int:
        """This step's grid width for a batch of ``rows`` rows of which
        ``eligible`` (uids) may draft (1: a plain step); each drafting
        row's draft length is then :meth:`limit`. Without a controller
        every eligible row drafts ``tokens`` tokens. Counts the step in
        :attr:`steps` (``drafted``, or why not)."""
        if self.controller is not None:
            width = self.controller.plan(rows, eligible)
            self.count("drafted" if width > 1 else self.controller.skip_reason)
            return width
        self._everyone = set(eligible)
        self.count("drafted" if eligible else "no_rows")
        return self.tokens + 1 if eligible else 1

    def count(self, outcome: str) -> None:
        """Count one engine step's outcome in :attr:`steps`: ``drafted`` (a
        verification was planned), or the reason it was not: ``batch``
        (more rows than ``max_batch``), ``no_rows`` (no row may draft),
        ``no_gain``, ``ledger``, ``timing`` (the controller's, see
        :mod:`worker.speculation.controller`) or ``no_draft`` (planned, but
        no row found a draft; also counted as ``drafted``)."""
        self.steps[outcome] = self.steps.get(outcome, 0) + 1

    def limit(self, uid: int) -> int:
        """Row ``uid``'s draft length this step (0: it does not draft)."""
        if self.controller is not None:
            return self.controller.limit(uid)
        return self.tokens if uid in self._everyone else 0

    def verifying(self, width: int) -> None:
        """The speculative step verifies a grid ``width`` positions wide."""
        if self.controller is not None:
            self.controller.verifying(width)

    def missed(self) -> None:
        """The planned speculative step found no draft: it runs plain."""
        self.count("no_draft")
        if self.controller is not None:
            self.controller.missed()

    def interrupted(self) -> None:
        """This engine step also prefilled: its time is not a step's."""
        if self.controller is not None:
            self.controller.interrupted()

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
        return not self._rows and (self.controller is None or self.controller.idle)


def draft_step_stats(spec: Speculation | None) -> dict[str, Any]:
    """The :class:`shared.protocol.WorkerStats` fields of ``spec``'s step
    counts (read from another thread: one C-level copy of the dict):
    ``draft_steps``, the steps that verified drafts, and
    ``draft_skipped_steps``, the others by reason."""
    if spec is None:
        return {"draft_steps": 0, "draft_skipped_steps": {}}
    steps = dict(spec.steps)
    drafted = steps.pop("drafted", 0)
    return {"draft_steps": drafted - steps.get("no_draft", 0), "draft_skipped_steps": steps}
