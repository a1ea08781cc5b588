"""When drafting pays: a step's grid width from a cost model, per-row
acceptance, and a ledger that bounds what speculation may lose.

A speculative step feeds every row of the batch its pending token and up
to ``width - 1`` draft tokens (rows padded to the grid's width), after a
host sync that gives up mlx-lm's overlap of Python work with the next
forward pass. It pays through the draft tokens accepted. :class:`DraftController`
decides before each step, without touching MLX:

* **What the drafts return.** Each row keeps an estimate ``p`` of the
  chance that its next draft token is accepted (accepted tokens against
  rejections, exponentially weighted, starting from the model-wide
  figures) and of the chance that it finds a draft at all. A draft cut to
  ``n`` tokens is expected to add ``found * (p + p^2 + ... + p^n)``
  tokens.
* **What a step costs.** A plain step's seconds at ``rows`` rows and a
  speculative step's cost as a multiple of it, per batch-size bucket and
  grid width (measured; a line through the measured widths; a prior for
  what was never measured). Steps are timed from one step's start to the
  next's (:meth:`start_step`). A speculative step is also charged what the
  plain step after it takes beyond a plain step (measured: that step
  cannot overlap a forward pass the way mlx-lm's pipelined steps do, and
  costs about 1.5 plain steps on this CPU). Intervals that held other work
  (a prefill, rows joining or leaving) are not used.
* **The choice.** The width ``w`` that makes the most tokens per plain
  step's time, ``(rows + expected accepted) / cost(w)``, if that beats the
  plain step by :data:`MARGIN`. Then every row that may draft does (a
  row's padding costs the same as a draft there). Otherwise the step is
  plain.
* **The ledger.** Every speculative step's outcome is booked in plain
  steps: what it made, ``1 + accepted / rows``, minus what it cost. Every
  step adds :data:`BUDGET` of its own cost, and the balance starts at
  :data:`CREDIT_START`, is capped at :data:`CREDIT_STEPS` and floored at
  :data:`DEBT_STEPS` of debt (a step that took far longer than predicted:
  the machine stalled). A speculative
  step needs a balance that covers its loss if every draft missed
  (``cost - 1``), so wrong predictions and exploration lose at most about
  ``BUDGET`` of the time in the long run and :data:`CREDIT_START` at the
  start, while steps that pay keep the balance full.
* **Widening by measurement.** Where steps are timed, a batch-size bucket
  with no measured speculative step may only draft one token per row
  (width :data:`PROBE_WIDTH`), and a step may be at most one position
  wider than the widest measured in its bucket; a width beyond the one
  measured width costs as if all of that width's excess over a plain step
  grew with the width; the bucket's first speculative step is booked
  before a second one is planned. The grid widens step by step where it pays (on a
  memory-bound GPU within a few steps), and never jumps to a width whose
  cost nobody measured (on this CPU a 16-row grid of width 9 costs about
  five plain steps, where the prior says two).
* **Exploration.** When no width is expected to pay, the rows are tried
  again together in a *probe* (every row drafts, width
  :data:`PROBE_WIDTH`) when the countdown ends, the ledger allows, and
  some allowed width would pay if every draft were accepted: the
  countdown starts at :data:`PROBE_FIRST`, doubles after a probe that did
  not pay for itself, up to :data:`PROBE_LAST`, and starts over after one
  that did. A batch size with no fresh plain timing takes plain steps
  first (:data:`REFRESH_STEPS`).

With ``timed`` off (a tensor-parallel group, whose ranks must decide
alike, or ``MLXD_SPECULATION_TIMING=0``) the costs are the prior's and
nothing is measured: the same inputs give the same decisions.

Pure Python; used on the scheduler thread only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

MARGIN = 0.02
"""A speculative step is planned only when its expected tokens per time
beat the plain step's by this share."""

BUDGET = 0.01
"""Share of each step's cost credited to the ledger: the long-run loss
speculation may cause where drafts do not pay."""

CREDIT_STEPS = 8.0
"""Most credit the ledger holds, in plain steps."""

DEBT_STEPS = 1.0
"""Most debt the ledger books, in plain steps: a speculative step is planned
only with credit for its predicted loss, so a deeper debt means the step
took far longer than any width's cost (the machine stalled), and must not
switch drafting off for thousands of steps."""

CREDIT_START = 1.0
"""The ledger's credit before any speculative step, in plain steps: what a
model's first guesses may lose before a draft has paid (a short burst of
requests must not pay for exploration out of its own few steps)."""

PROBE_FIRST = 8
PROBE_LAST = 256
"""Steps between probes: the first interval and the longest."""

PROBE_WIDTH = 2
"""A probe's grid width: one draft token per row."""

REFRESH_STEPS = 256
"""A batch size whose plain step was last timed this many steps ago (or
never) takes plain steps until it is timed again."""

PRIOR_BASE = 1.05
PRIOR_SLOPE = 0.10
"""The prior cost of a speculative step of width ``w``, in plain steps:
``PRIOR_BASE + PRIOR_SLOPE * (w - 1)``; also the slope assumed beyond the
one width measured."""

ROW_WEIGHT = 0.1
"""Weight of the newest observation in a row's (and the model's) figures."""

TIME_WEIGHT = 0.2
"""Weight of the newest measurement in the cost figures."""


def bucket(rows: int) -> int:
    """The batch-size bucket speculative costs are kept under: 1, 2, 4, 8,
    16, ... (the next power of two)."""
    return 1 << max(0, rows - 1).bit_length()


@dataclass
class _Row:
    hits: float
    misses: float
    found: float


@dataclass
class _Step:
    """The engine step in progress (what :meth:`DraftController.start_step`
    closes when the next one starts)."""

    start: float = 0.0
    rows: int = 0
    kind: str = "none"  # "plain", "spec", "miss" or "none" (not begun)
    width: int = 1
    accepted: int = 0
    clean: bool = True
    probe: bool = False


def line_at(points: dict[int, float], x: float) -> float:
    """The least-squares line through ``points`` (``x: y``, at least two),
    never sloping down, at ``x``."""
    n = len(points)
    mx = sum(points) / n
    my = sum(points.values()) / n
    var = sum((px - mx) ** 2 for px in points)
    slope = max(0.0, sum((px - mx) * (py - my) for px, py in points.items()) / var)
    return my + slope * (x - mx)


@dataclass
class DraftController:
    """Drafting decisions of one model (see the module docstring).
    ``tokens``: the longest draft; ``timed``: use measured step times
    (read from ``clock``, seconds).

    Per step: :meth:`start_step`, then :meth:`plan` (the grid width, 1: plain)
    and :meth:`limit` per row; for a speculative step :meth:`verifying`
    with the width of the drafts found and
    :meth:`observe` per drafting row (or :meth:`missed` when no row found a
    draft); :meth:`interrupted` when the step also did other work."""

    tokens: int = 8
    timed: bool = True
    clock: Callable[[], float] = time.perf_counter
    hits: float = 1.0
    misses: float = 1.0
    found: float = 0.5
    credit: float = CREDIT_START
    probe: int = PROBE_FIRST
    steps: int = 0
    planned: dict[str, int] = field(default_factory=dict)
    _until_probe: int = PROBE_FIRST
    _rows: dict[int, _Row] = field(default_factory=dict)
    _limits: dict[int, int] = field(default_factory=dict)
    _plain: dict[int, float] = field(default_factory=dict)
    _plain_at: dict[int, int] = field(default_factory=dict)
    _ratios: dict[int, dict[int, float]] = field(default_factory=dict)
    _step: _Step = field(default_factory=_Step)
    _pending: tuple[_Step, float, bool] | None = None

    # -- the step's life ---------------------------------------------------------

    def start_step(self, rows: int) -> None:
        """A generation step of ``rows`` rows starts: close the previous
        step's interval (its cost) and count down to the next probe."""
        now = self.clock() if self.timed else 0.0
        previous = self._step
        if previous.kind != "none":
            self._close(previous, now, previous.clean, previous.rows == rows)
        self._step = _Step(start=now, rows=rows)
        self._limits.clear()
        self.steps += 1
        self._until_probe -= 1

    def pause(self) -> None:
        """The engine went idle: the step in progress ends now, as one that
        held other work (not a timing sample), and a speculative step not
        yet booked is booked without the next step's excess. The next
        :meth:`start_step` opens a fresh interval, so no step is charged the
        idle time. Nothing happens when not ``timed`` (every rank of a
        group must book alike, and only rank 0 sees the idle turns) or
        when no step is open."""
        if not self.timed or self._step.kind == "none":
            return
        self._close(self._step, self.clock(), False, False)
        self._step = _Step()
        if self._pending is not None:
            self._book(self._pending, 0.0, False)
            self._pending = None

    def plan(self, rows: int, eligible: list[int]) -> int:
        """The grid width of this step for a batch of ``rows`` rows where
        ``eligible`` (uids) may draft: 1 for a plain step. Sets each
        drafting row's :meth:`limit`."""
        step = self._step
        width, drafting, probe = self._choose(rows, eligible)
        step.kind = "plain" if width <= 1 else "spec"
        step.width, step.probe = width, probe
        reason = "probe" if probe else ("drafted" if width > 1 else self.skip_reason)
        self.planned[reason] = self.planned.get(reason, 0) + 1
        for uid in drafting:
            self._limits[uid] = width - 1
        return width

    def limit(self, uid: int) -> int:
        """Row ``uid``'s draft length this step (0: it does not draft)."""
        return self._limits.get(uid, 0)

    def verifying(self, width: int) -> None:
        """The speculative step's grid is ``width`` positions wide (one more
        than its longest draft; at most the planned width)."""
        self._step.width = width

    def missed(self) -> None:
        """The planned speculative step found no draft in any row: a plain
        step runs after the host sync."""
        self._step.kind = "miss"

    def interrupted(self) -> None:
        """This step's interval also holds other work (a prefill): not a
        timing sample."""
        self._step.clean = False

    def observe(self, uid: int, drafted: int, accepted: int) -> None:
        """Row ``uid`` was asked for a draft of up to :meth:`limit` tokens,
        drafted ``drafted`` (0: it found none) and got ``accepted`` of them
        accepted."""
        row = self._row(uid)
        keep = 1.0 - ROW_WEIGHT
        found = 1.0 if drafted else 0.0
        row.found = keep * row.found + ROW_WEIGHT * found
        self.found = keep * self.found + ROW_WEIGHT * found
        if not drafted:
            return
        rejected = 1.0 if accepted < drafted else 0.0
        row.hits = keep * row.hits + accepted
        row.misses = keep * row.misses + rejected
        self.hits = keep * self.hits + accepted
        self.misses = keep * self.misses + rejected
        self._step.accepted += accepted

    def forget(self, uid: int) -> None:
        """Drop row ``uid``'s record."""
        self._rows.pop(uid, None)
        self._limits.pop(uid, None)

    @property
    def idle(self) -> bool:
        """Whether no row has a record."""
        return not self._rows

    # -- the model ---------------------------------------------------------------

    skip_reason: str = "no_gain"
    """Why the last :meth:`plan` chose a plain step: ``no_rows`` (no row may
    draft), ``timing`` (the batch size's plain step is being timed),
    ``ledger`` (the ledger's credit does not cover the step's loss if every draft
    missed) or ``no_gain``."""

    def _row(self, uid: int) -> _Row:
        row = self._rows.get(uid)
        if row is None:
            p = self._p(self.hits, self.misses)
            row = self._rows[uid] = _Row(hits=2 * p, misses=2 * (1 - p), found=self.found)
        return row

    @staticmethod
    def _p(hits: float, misses: float) -> float:
        return hits / (hits + misses) if hits + misses > 0 else 0.0

    def expected(self, uid: int) -> list[float]:
        """Row ``uid``'s expected accepted tokens for a draft of at most
        ``n`` tokens, for ``n`` = 0 .. ``tokens``."""
        row = self._row(uid)
        p = self._p(row.hits, row.misses)
        sums, total, term = [0.0], 0.0, row.found
        for _ in range(self.tokens):
            term *= p
            total += term
            sums.append(total)
        return sums

    def plain_seconds(self, rows: int) -> float | None:
        """A plain step's measured seconds at ``rows`` rows (None: never
        measured, or not ``timed``)."""
        return self._plain.get(rows) if self.timed else None

    def cost(self, rows: int, width: int) -> float:
        """A speculative step's cost at ``rows`` rows and grid ``width``, in
        plain steps at that batch size."""
        measured = self._ratios.get(bucket(rows)) if self.timed else None
        if not measured:
            return PRIOR_BASE + PRIOR_SLOPE * (width - 1)
        if len(measured) == 1:
            ((w0, r0),) = measured.items()
            slope = max(PRIOR_SLOPE, (r0 - 1.0) / (w0 - 1))  # all of the excess grows with the width
            return max(1.0, r0 + slope * (width - w0))
        return max(1.0, line_at(measured, width))

    def widest(self, rows: int) -> int:
        """The widest grid a step at ``rows`` rows may use: one more than
        the widest measured in its bucket (:data:`PROBE_WIDTH` before any),
        or ``tokens + 1`` where nothing is timed."""
        if not self.timed:
            return self.tokens + 1
        measured = self._ratios.get(bucket(rows))
        return min(self.tokens + 1, max(measured) + 1 if measured else PROBE_WIDTH)

    def _choose(self, rows: int, eligible: list[int]) -> tuple[int, list[int], bool]:
        """The step's width, the rows that draft and whether it is a probe."""
        self.skip_reason = "no_gain"
        if not eligible:
            self.skip_reason = "no_rows"
            return 1, [], False
        if self.timed and self.steps - self._plain_at.get(rows, -REFRESH_STEPS) >= REFRESH_STEPS:
            self.skip_reason = "timing"
            return 1, [], False
        if self.credit <= 0:
            self.skip_reason = "ledger"
            return 1, [], False
        if self.timed and self._pending is not None and not self._ratios.get(bucket(rows)):
            self.skip_reason = "timing"  # the first speculative step of this bucket is not booked yet
            return 1, [], False
        expected = [self.expected(uid) for uid in eligible]
        best, best_value = 1, float(rows) * (1.0 + MARGIN)
        for width in range(2, self.widest(rows) + 1):
            gain = sum(e[width - 1] for e in expected)
            if not gain:
                break
            value = (rows + gain) / self.cost(rows, width)
            if value > best_value:
                best, best_value = width, value
        if best > 1 and self.credit >= self.cost(rows, best) - 1.0:
            return best, list(eligible), False
        if best > 1:
            self.skip_reason = "ledger"
            return 1, [], False
        if self._until_probe <= 0 and self._could_pay(rows):
            loss = self.cost(rows, PROBE_WIDTH) - 1.0
            if self.credit >= loss:
                self._until_probe = self.probe
                return PROBE_WIDTH, list(eligible), True
            self.skip_reason = "ledger"
        return 1, [], False

    def _could_pay(self, rows: int) -> bool:
        """Whether some allowed width would pay at ``rows`` rows if every
        draft token were accepted (a probe is pointless where none would:
        on a compute-bound machine a wide batch's grid costs about its
        width in plain steps)."""
        return any(width / self.cost(rows, width) > 1.0 + MARGIN for width in range(2, self.widest(rows) + 1))

    # -- measuring ---------------------------------------------------------------

    def _close(self, step: _Step, now: float, clean: bool, same_rows: bool) -> None:
        """Book the finished ``step`` (its interval ends ``now``; ``clean``:
        it held no prefill; ``same_rows``: no row joined or left in it).

        A speculative (or missed) step is booked one step late: the plain
        step after it pays part of its cost (it cannot overlap with a
        forward pass the speculative step left in flight), so that step's
        time beyond a plain step's is added to the speculative one's."""
        seconds = now - step.start
        plain = self.plain_seconds(step.rows)
        pending, self._pending = self._pending, None
        if pending is not None:
            extra = 0.0
            if step.kind == "plain" and self.timed and plain:
                extra = max(0.0, seconds - plain)
            self._book(pending, extra, clean)
        if step.kind in ("spec", "miss"):
            self._pending = (step, seconds, clean)
            return
        if step.kind == "plain":
            self.credit = min(CREDIT_STEPS, self.credit + BUDGET)
            if self.timed and clean and same_rows and pending is None:
                old = self._plain.get(step.rows)
                self._plain[step.rows] = seconds if old is None else old + TIME_WEIGHT * (seconds - old)
                self._plain_at[step.rows] = self.steps

    def _book(self, pending: tuple[_Step, float, bool], extra: float, after_clean: bool) -> None:
        """Book a speculative step: its cost in plain steps (measured: its
        own interval plus ``extra``, the next step's excess), a sample of
        its width's cost, its outcome in the ledger, a probe's verdict."""
        step, seconds, clean = pending
        plain = self.plain_seconds(step.rows) if self.timed else None
        made = 1.0 + (step.accepted / max(1, step.rows) if step.kind == "spec" else 0.0)
        if plain is None:
            cost = self.cost(step.rows, step.width) if step.kind == "spec" else 1.0
        else:
            # the ledger books what the step took even when other work shared
            # its interval (never the prior's guess); the cost model learns
            # only from intervals without a prefill
            cost = (seconds + extra) / plain
            if step.kind == "spec" and clean and after_clean:
                ratios = self._ratios.setdefault(bucket(step.rows), {})
                old = ratios.get(step.width)
                ratios[step.width] = cost if old is None else old + TIME_WEIGHT * (cost - old)
        # a step needs credit for its predicted loss; one far dearer than
        # predicted (a hiccup of the machine) leaves a debt of at most DEBT_STEPS
        self.credit = max(-DEBT_STEPS, min(CREDIT_STEPS, self.credit + made - cost + BUDGET * cost))
        if step.probe:  # the countdown restarted when it was planned
            interval = PROBE_FIRST if made >= cost else min(PROBE_LAST, 2 * self.probe)
            self._until_probe += interval - self.probe
            self.probe = interval
