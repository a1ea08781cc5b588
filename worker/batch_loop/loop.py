"""The scheduler loop of a kind that does not generate: one inbox, one loop,
one terminal output per request.

:class:`BatchLoop` owns what every such scheduler does the same way: the
inbox (jobs, ``Abort``, ``Stop``), admission (a duplicate request id is
dropped), aborts, deadlines, shutdown, ending every request in flight when
a step fails, and the counters the heartbeats read. A kind subclasses it
and supplies only how it batches and runs its inputs:

- :attr:`~BatchLoop.job_type`, the job class its input thread builds (with
  ``request_id`` and ``deadline``), :attr:`~BatchLoop.name` (its logger and
  log lines) and :attr:`~BatchLoop.work` (the error a failed step ends
  requests with);
- :meth:`~BatchLoop._open`: a job into the kind's record of an admitted
  request (which keeps the job as ``job``);
- :meth:`~BatchLoop._step`: one turn of work (a batch, a chunk, a round),
  which emits what is ready, finishes requests by popping them from
  ``_live`` and may raise;
- optionally :meth:`~BatchLoop._busy`, :meth:`~BatchLoop._count`,
  :meth:`~BatchLoop._ended_tokens`, :meth:`~BatchLoop._send_ended` and
  :meth:`~BatchLoop._end` (to drop the kind's own queued inputs too), and
  ``warm_up``.

Every admitted request ends with exactly one terminal output: the kind's
answer (from ``_step``), an ``abort`` (client gone, shutdown), a ``timeout``
error past its deadline, or an ``internal`` error when a step fails (the
failure then escapes :meth:`BatchLoop.run` and the worker exits to be
replaced). A request that ends leaves ``_live`` at once, so its memory goes
with it.

Threads: :meth:`BatchLoop.run` and ``warm_up`` run on the scheduler thread,
the only one touching MLX; :meth:`BatchLoop.submit` may be called from any
thread. ``counters`` is written here and read by the output thread.
"""

from __future__ import annotations

import logging
import queue
import time
from typing import Any, Callable, Generic, TypeVar

from shared.protocol import RequestOutput, StepOutputs
from worker.messages import Abort, Counters, Stop

LiveT = TypeVar("LiveT")


class BatchLoop(Generic[LiveT]):
    """The shared loop; see the module docstring.

    ``model`` is the kind's loaded model (``self._model``); ``emit`` takes
    items for the output thread (thread-safe and non-blocking, e.g. the
    output thread's queue ``put``); ``max_batch_size`` (``self._max_batch``)
    is the most inputs the kind runs together. ``sample_memory`` (the worker
    passes :func:`worker.engine.mlx_memory.record`) writes MLX's memory
    counts into ``counters`` on every loop turn, for the heartbeats.
    ``cache`` and ``speculation`` are always None (no prefix cache, no
    drafting; the heartbeat code reads both, as on a generation scheduler).
    """

    cache = None
    speculation = None
    job_type: type = object
    """The job class the loop admits (anything else but ``Abort`` and
    ``Stop`` in the inbox is ignored)."""
    name = "batch"
    """The kind's name in its logger (``mlxd.worker.NAME``) and log lines."""
    work = "running"
    """What a step does, in the error that ends requests when it fails
    ("the model worker failed while WORK; retry")."""

    def __init__(
        self,
        model: Any,
        emit: Callable[[object], None],
        *,
        max_batch_size: int = 1,
        sample_memory: Callable[[Counters], None] | None = None,
    ) -> None:
        self._model = model
        self._emit = emit
        self._max_batch = max_batch_size
        self.inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.counters = Counters()
        self._sample_memory = sample_memory
        self._live: dict[str, LiveT] = {}
        self._log = logging.getLogger(f"mlxd.worker.{self.name}")

    def submit(self, item: object) -> None:
        """Queue a job of :attr:`job_type`, an ``Abort`` or ``Stop``; any thread."""
        self.inbox.put(item)

    def warm_up(self) -> None:
        """Run the model once on small inputs so kernels are built before
        the worker says Ready (each kind supplies it)."""
        raise NotImplementedError

    def run(self) -> None:
        """The loop: apply commands, expire deadlines, run one step.
        Returns after ``Stop`` (everything in flight aborted); a failing
        step ends every request in flight with an error and then
        propagates (the worker exits, see ``worker.main``)."""
        while True:
            if not self._drain(block=not self._busy()):
                return
            self._expire(time.monotonic())
            if self._busy():
                try:
                    if self._step() is False:
                        return
                except Exception:
                    self._log.exception("%s failed; failing %d requests", self.work, len(self._live))
                    self._end(
                        list(self._live), "error", "internal", f"the model worker failed while {self.work}; retry"
                    )
                    raise
            self.counters.running = len(self._live)
            self._count(self.counters)
            if self._sample_memory is not None:
                self._sample_memory(self.counters)  # MLX's memory counts, for the heartbeats

    # -- what each kind supplies ------------------------------------------------

    def _open(self, job: Any) -> LiveT:
        """The record of a newly admitted ``job`` (its id not in flight)."""
        raise NotImplementedError

    def _step(self) -> bool | None:
        """One turn of work on the requests in flight; False when a ``Stop``
        arrived during it (the loop then returns)."""
        raise NotImplementedError

    def _busy(self) -> bool:
        """Whether there is work for a step (default: a request in flight)."""
        return bool(self._live)

    def _count(self, counters: Counters) -> None:
        """Kind-specific counters at the end of a loop turn (``running`` is
        already set); default: none."""

    def _ended_tokens(self, live: LiveT) -> int:
        """The ``prompt_tokens`` of a request ending without its answer."""
        return 0

    def _send_ended(self, lives: list[LiveT], reason: str, kind: str | None, message: str | None) -> None:
        """Emit the terminal outputs of requests ending without their
        answer (default: one ``StepOutputs`` of them all)."""
        outputs = [
            RequestOutput(
                request_id=live.job.request_id,  # type: ignore[attr-defined]
                prompt_tokens=self._ended_tokens(live),
                finish_reason=reason,  # type: ignore[arg-type]
                error=message,
                error_kind=kind,  # type: ignore[arg-type]
            )
            for live in lives
        ]
        self._emit(StepOutputs(step=-1, outputs=outputs))

    # -- commands ---------------------------------------------------------------

    def _drain(self, block: bool) -> bool:
        """Apply every queued command (waiting up to 0.5 s for one when
        ``block``); False when a ``Stop`` was seen."""
        try:
            item = self.inbox.get(timeout=0.5) if block else self.inbox.get_nowait()
        except queue.Empty:
            return True
        while True:
            if isinstance(item, Stop):
                self._end(list(self._live), "abort")
                return False
            if isinstance(item, self.job_type):
                self._admit(item)
            elif isinstance(item, Abort):
                self._end([r for r in item.request_ids if r in self._live], "abort")
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return True

    def _admit(self, job: Any) -> None:
        if job.request_id in self._live:
            self._log.error("duplicate %s request id %s dropped", self.name, job.request_id)
            return
        self._live[job.request_id] = self._open(job)
        self.counters.running = len(self._live)

    def _expire(self, now: float) -> None:
        late = [r for r, live in self._live.items() if (d := live.job.deadline) is not None and now >= d]  # type: ignore[attr-defined]
        if late:
            self.counters.requests_timed_out += len(late)
            self._end(late, "error", "timeout", "the request ran past its deadline and was stopped")

    def _end(self, request_ids: list[str], reason: str, kind: str | None = None, message: str | None = None) -> None:
        """End requests in flight without their answer: each leaves
        ``_live`` and gets its one terminal output."""
        if not request_ids:
            return
        lives = [self._live.pop(request_id) for request_id in request_ids]
        if reason == "abort":
            self.counters.requests_aborted += len(lives)
        self._send_ended(lives, reason, kind, message)
