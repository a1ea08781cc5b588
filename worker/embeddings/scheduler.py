"""The scheduler thread of an embedding worker: batches inputs and encodes them.

Inputs of every admitted request wait in one first-come-first-served queue.
Each step takes up to ``max_batch_size`` of them (from as many requests as
they come from), sorts them by length so similar lengths are padded
together, encodes them in groups of at most :data:`STEP_TOKENS` padded
tokens, and files each vector with its request. A request whose last input
is done is answered at once with one :class:`~shared.protocol.RequestOutput`
holding all its vectors (see the wire contract), so a small request is not
held back by a large one queued before it for longer than its inputs' turn.

Every admitted request ends with exactly one terminal output: its vectors,
an ``abort`` (client gone, shutdown), a ``timeout`` error past its deadline,
or an ``internal`` error if encoding fails (the failure then escapes
:meth:`EmbeddingScheduler.run` and the worker exits to be replaced).

Threads: :meth:`EmbeddingScheduler.run` and :meth:`warm_up` run on the
scheduler thread, the only one touching MLX; :meth:`submit` may be called
from any thread. ``counters`` is written here and read by the output thread.
"""

from __future__ import annotations

import logging
import queue
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from shared.protocol import RequestOutput, StepOutputs
from worker.embeddings.model import EmbeddingModel
from worker.messages import Abort, Counters, Stop

log = logging.getLogger("mlxd.worker.embedding")

STEP_TOKENS = 16384
"""Most padded tokens (rows x longest row) encoded in one forward pass."""


@dataclass
class EmbedJob:
    """A tokenized embedding request (built on the input thread).

    ``inputs`` are the token ids of each input (any sized rows the model's
    ``encode`` takes, e.g. a reranker's token pairs); ``dimensions`` the vector
    length asked for (None: the model's); ``deadline`` a
    ``time.monotonic()`` instant or None; ``received`` when the worker got
    it.
    """

    request_id: str
    inputs: list[list[int]]
    dimensions: int | None = None
    deadline: float | None = None
    received: float = 0.0


@dataclass
class _Live:
    """An admitted request: its vectors so far and how many are missing."""

    job: EmbedJob
    vectors: list[np.ndarray | None]
    missing: int
    tokens: int
    queue_seconds: float | None = None
    started: bool = False


@dataclass
class _Item:
    """One input waiting for its turn."""

    request_id: str
    index: int
    tokens: list[int] = field(repr=False)


class EmbeddingScheduler:
    """Runs ``model`` on the scheduler thread; see the module docstring.

    ``emit`` takes ready contract messages (thread-safe and non-blocking,
    e.g. the output thread's queue ``put``). ``max_batch_size`` is the most
    inputs encoded in one step. ``sample_memory`` (the worker passes
    :func:`worker.engine.mlx_memory.record`) writes MLX's memory counts into
    ``counters`` on every loop turn, for the heartbeats. ``model`` needs ``encode(rows)`` returning
    one result per row; a subclass answers with other results by
    overriding :meth:`_answer` (see :mod:`worker.rerank.scheduler`). ``cache`` and ``speculation`` are always
    None (no prefix cache, no drafting; the heartbeat code reads both, as
    on a generation scheduler).
    """

    cache = None
    speculation = None

    def __init__(
        self,
        model: EmbeddingModel | Any,
        emit: Callable[[object], None],
        *,
        max_batch_size: int,
        sample_memory: Callable[[Counters], None] | None = None,
    ) -> None:
        self._model = model
        self._emit = emit
        self._max_batch = max_batch_size
        self.inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.counters = Counters()
        self._sample_memory = sample_memory
        self._live: dict[str, _Live] = {}
        self._waiting: deque[_Item] = deque()

    def submit(self, item: object) -> None:
        """Queue an :class:`EmbedJob`, ``Abort`` or ``Stop``; any thread."""
        self.inbox.put(item)

    def warm_up(self) -> None:
        """Encode a short and a batched input once so kernels are built
        before the worker says Ready."""
        self._model.encode([[0, 1]])
        self._model.encode([[0, 1, 2]] * 4)

    def run(self) -> None:
        """The loop: apply commands, expire deadlines, encode one step.
        Returns after ``Stop`` (everything in flight aborted); an encoding
        failure ends every request in flight with an error and then
        propagates (the worker exits, see ``worker.main``)."""
        while True:
            if not self._drain(block=not self._waiting):
                return
            self._expire(time.monotonic())
            if self._waiting:
                self._step()
            c = self.counters
            c.running, c.waiting = len(self._live), len(self._waiting)
            if self._sample_memory is not None:
                self._sample_memory(c)  # MLX's memory counts, for the heartbeats

    # -- commands -------------------------------------------------------------

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
            if isinstance(item, EmbedJob):
                self._admit(item)
            elif isinstance(item, Abort):
                self._end([r for r in item.request_ids if r in self._live], "abort")
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return True

    def _admit(self, job: EmbedJob) -> None:
        if job.request_id in self._live:
            log.error("duplicate embedding request id %s dropped", job.request_id)
            return
        self._live[job.request_id] = _Live(
            job, [None] * len(job.inputs), len(job.inputs), sum(len(ids) for ids in job.inputs)
        )
        self._waiting.extend(_Item(job.request_id, i, ids) for i, ids in enumerate(job.inputs))

    def _expire(self, now: float) -> None:
        late = [r for r, live in self._live.items() if live.job.deadline is not None and now >= live.job.deadline]
        if late:
            self.counters.requests_timed_out += len(late)
            self._end(late, "error", "timeout", "the request ran past its deadline and was stopped")

    def _end(self, request_ids: list[str], reason: str, kind: str | None = None, message: str | None = None) -> None:
        """End requests without their vectors (one terminal each) and drop
        their waiting inputs."""
        if not request_ids:
            return
        gone = set(request_ids)
        self._waiting = deque(item for item in self._waiting if item.request_id not in gone)
        outputs = []
        for request_id in request_ids:
            live = self._live.pop(request_id)
            if reason == "abort":
                self.counters.requests_aborted += 1
            outputs.append(
                RequestOutput(
                    request_id=request_id,
                    prompt_tokens=live.tokens,
                    finish_reason=reason,  # type: ignore[arg-type]
                    error=message,
                    error_kind=kind,  # type: ignore[arg-type]
                )
            )
        self._emit(StepOutputs(step=-1, outputs=outputs))

    # -- encoding ---------------------------------------------------------------

    def _step(self) -> None:
        started = time.perf_counter()
        take = [self._waiting.popleft() for _ in range(min(self._max_batch, len(self._waiting)))]
        now = time.monotonic()
        for item in take:
            live = self._live[item.request_id]
            if not live.started:
                live.started = True
                live.queue_seconds = max(0.0, now - live.job.received) if live.job.received else None
        take.sort(key=lambda item: len(item.tokens))
        try:
            for group in _groups(take):
                vectors = self._model.encode([item.tokens for item in group])
                for item, vector in zip(group, vectors):
                    self._file(item, vector)
        except Exception:
            log.exception("encoding failed; failing %d requests", len(self._live))
            self._end(list(self._live), "error", "internal", "the model worker failed while encoding; retry")
            raise
        c = self.counters
        c.steps += 1
        c.step_seconds += time.perf_counter() - started
        c.max_batch_seen = max(c.max_batch_seen, len(take))
        c.prompt_tokens += sum(len(item.tokens) for item in take)
        self._finish_complete()

    def _file(self, item: _Item, vector: np.ndarray) -> None:
        live = self._live.get(item.request_id)
        if live is None:
            return
        live.vectors[item.index] = vector
        live.missing -= 1

    def _finish_complete(self) -> None:
        done = [r for r, live in self._live.items() if live.missing == 0]
        if not done:
            return
        outputs = [self._answer(request_id, self._live.pop(request_id)) for request_id in done]
        self.counters.requests_finished += len(done)
        self._emit(StepOutputs(step=self.counters.steps, outputs=outputs))

    def _answer(self, request_id: str, live: _Live) -> RequestOutput:
        """The terminal output of a request whose every input is encoded
        (a subclass answering with other results overrides this)."""
        matrix = shorten(np.stack(live.vectors), live.job.dimensions, self._model.pooling.normalize)  # type: ignore[arg-type]
        return RequestOutput(
            request_id=request_id,
            prompt_tokens=live.tokens,
            finish_reason="stop",
            embeddings=np.ascontiguousarray(matrix, dtype="<f4").tobytes(),
            embedding_dim=matrix.shape[1],
            queue_seconds=live.queue_seconds,
        )


def _groups(items: list[_Item]) -> list[list[_Item]]:
    """Split inputs sorted by length into runs of at most
    :data:`STEP_TOKENS` padded tokens (at least one input each)."""
    groups: list[list[_Item]] = []
    current: list[_Item] = []
    for item in items:
        if current and (len(current) + 1) * len(item.tokens) > STEP_TOKENS:
            groups.append(current)
            current = []
        current.append(item)
    if current:
        groups.append(current)
    return groups


def shorten(matrix: np.ndarray, dimensions: int | None, normalize: bool) -> np.ndarray:
    """Keep the first ``dimensions`` values of each row (all when None),
    L2-normalizing the shortened rows again when the model normalizes."""
    if dimensions is None or dimensions >= matrix.shape[1]:
        return matrix
    short = matrix[:, :dimensions]
    if normalize:
        short = short / np.maximum(np.linalg.norm(short, axis=1, keepdims=True), 1e-12)
    return short
