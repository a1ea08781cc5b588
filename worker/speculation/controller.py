"""When drafting pays: per-row gains, draft lengths and a per-batch gate.

A speculative step costs more than a plain one (a host sync before the
forward pass, a wider forward, verification, cutting the caches back) and
pays only through the draft tokens the rows get accepted. :class:`DraftController`
decides, step by step, which rows draft, how long their drafts are, and
whether the batch speculates at all:

* each row has a *gain*: an exponential average of the draft tokens it got
  accepted per drafting step (a step where it found no draft counts as
  0). A new row starts from the model-wide average gain, but at least
  :data:`ROW_MIN_GAIN`: on a workload where drafts keep missing, a new
  row drafts once and stops at its first miss. A row whose gain falls
  below :data:`ROW_MIN_GAIN` stops drafting;
* rows that stopped drafting are tried again all together in one *probe*
  step every ``probe`` steps: ``probe`` starts at :data:`PROBE_FIRST`,
  doubles after a probe whose rows got nothing accepted (up to
  :data:`PROBE_LAST`) and starts over after one that did, so text that is
  copied later in an answer is still found while a workload whose drafts
  all miss pays for about one speculative step in :data:`PROBE_LAST`;
* a row's draft length (up to the configured ``tokens``) doubles after a
  draft accepted whole and drops to one more than what was accepted
  after a rejection;
* the batch speculates only when the rows' summed gain covers the extra
  time of a speculative step at its width: ``gain >= rows * (spec/plain
  - 1)``, from the measured seconds of both kinds of step at that batch
  size (:meth:`DraftController.timed`; until both are measured the step
  is assumed to cost :data:`PRIOR_COST` plain steps). With ``timed`` off
  (a tensor-parallel group, whose ranks must decide alike) only the prior
  is used.

Pure Python; used on the scheduler thread only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GAIN_WEIGHT = 0.3
"""Weight of the newest observation in a row's (and the model's) gain."""

ROW_MIN_GAIN = 0.25
"""A row whose gain is below this many accepted tokens per drafting step
stops drafting until the next probe."""

PROBE_FIRST = 8
PROBE_LAST = 256
"""Steps between probes: the first interval and the longest."""

PRIOR_COST = 1.15
"""A speculative step's cost in plain steps, until measured."""

TIME_WEIGHT = 0.1
"""Weight of the newest measurement in the step-time averages."""


@dataclass
class _Row:
    gain: float
    length: int
    probing: bool = False


@dataclass
class DraftController:
    """Per-row drafting decisions of one model (see the module docstring).
    ``tokens``: the longest draft; ``timed``: use measured step times."""

    tokens: int = 8
    timed: bool = True
    gain: float = 1.0
    probe: int = PROBE_FIRST
    _until_probe: int = PROBE_FIRST
    _probe_step: bool = False
    _probe_paid: bool = False
    _rows: dict[int, _Row] = field(default_factory=dict)
    _plain: dict[int, float] = field(default_factory=dict)
    _spec: dict[int, float] = field(default_factory=dict)

    def tick(self) -> None:
        """Start a step: count down to the next probe (a probe step lets
        every switched-off row draft once)."""
        if self._probe_step:
            self._end_probe()
        self._until_probe -= 1
        self._probe_step = self._until_probe <= 0
        self._probe_paid = False

    def _end_probe(self) -> None:
        self._probe_step = False
        self.probe = PROBE_FIRST if self._probe_paid else min(PROBE_LAST, 2 * self.probe)
        self._until_probe = self.probe

    def _row(self, uid: int) -> _Row:
        row = self._rows.get(uid)
        if row is None:
            row = self._rows[uid] = _Row(max(self.gain, ROW_MIN_GAIN), self.tokens)
        return row

    def wants(self, uid: int) -> bool:
        """Whether row ``uid`` drafts this step: its gain is high enough,
        or this is a probe step."""
        row = self._row(uid)
        row.probing = row.gain < ROW_MIN_GAIN
        return not row.probing or self._probe_step

    def pays(self, rows: int, drafting: list[int]) -> bool:
        """Whether a batch of ``rows`` rows, of which ``drafting`` (uids)
        want to draft, should speculate this step."""
        if not drafting:
            return False
        if self._probe_step:
            return True  # also re-measures a cost that may have been judged on noise
        gain = sum(self._row(u).gain for u in drafting)
        return gain >= rows * (self.cost(rows) - 1.0)

    def cost(self, rows: int) -> float:
        """A speculative step's measured cost in plain steps at ``rows``
        rows (:data:`PRIOR_COST` until both kinds were timed, or when not
        ``timed``)."""
        plain, spec = self._plain.get(rows), self._spec.get(rows)
        if not self.timed or plain is None or spec is None or plain <= 0:
            return PRIOR_COST
        return spec / plain

    def limit(self, uid: int) -> int:
        """Row ``uid``'s draft length this step."""
        return self._row(uid).length

    def observe(self, uid: int, drafted: int, accepted: int) -> None:
        """Row ``uid`` drafted ``drafted`` tokens (0: it found none) and got
        ``accepted`` of them accepted."""
        row = self._row(uid)
        row.gain += GAIN_WEIGHT * (accepted - row.gain)
        self.gain += GAIN_WEIGHT * (accepted - self.gain)
        if drafted:
            row.length = min(self.tokens, 2 * row.length) if accepted == drafted else accepted + 1
        if accepted and row.probing:
            self._probe_paid = True
        if row.probing and accepted:
            row.gain = max(row.gain, ROW_MIN_GAIN)

    def timed_step(self, rows: int, speculative: bool, seconds: float) -> None:
        """Record one step's wall time (``speculative``: a verification
        step) at a batch of ``rows`` rows."""
        table = self._spec if speculative else self._plain
        old = table.get(rows)
        table[rows] = seconds if old is None else old + TIME_WEIGHT * (seconds - old)

    def forget(self, uid: int) -> None:
        """Drop row ``uid``'s record."""
        self._rows.pop(uid, None)
