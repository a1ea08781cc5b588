"""The scheduler thread of an embedding worker: batches inputs and encodes them.

Inputs of every admitted request wait in one first-come-first-served queue.
Each step takes up to ``max_batch_size`` of them (from as many requests as
they come from), sorts them by length so similar lengths are padded
together, encodes them in groups of at most :data:`STEP_TOKENS` padded
tokens, and files each vector with its request. A request whose last input
is done is answered at once with one :class:`~shared.protocol.RequestOutput`
holding all its vectors (see the wire contract), so a small request is not
held back by a large one queued before it for longer than its inputs' turn.

The inbox, aborts, deadlines, shutdown and failure handling are the shared
loop's (:class:`~worker.batch_loop.loop.BatchLoop`); this module supplies
the queue of inputs and the encoding step. Every admitted request ends with exactly one terminal output: its vectors,
an ``abort`` (client gone, shutdown), a ``timeout`` error past its deadline,
or an ``internal`` error if encoding fails (the failure then escapes
:meth:`EmbeddingScheduler.run` and the worker exits to be replaced).

Threads: :meth:`EmbeddingScheduler.run` and :meth:`warm_up` run on the
scheduler thread, the only one touching MLX; :meth:`submit` may be called
from any thread. ``counters`` is written here and read by the output thread.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from shared.protocol import RequestOutput, StepOutputs
from worker.batch_loop.loop import BatchLoop
from worker.embeddings.model import EmbeddingModel
from worker.messages import Counters

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


class EmbeddingScheduler(BatchLoop[_Live]):
    """Runs ``model`` on the scheduler thread through the shared loop
    (:class:`~worker.batch_loop.loop.BatchLoop`: ``emit``,
    ``max_batch_size``, the most inputs encoded in one step, and
    ``sample_memory`` as there); see the module docstring. ``model`` needs
    ``encode(rows)`` returning one result per row; a subclass answers with
    other results by overriding :meth:`_answer` (see
    :mod:`worker.rerank.scheduler`).
    """

    job_type = EmbedJob
    name = "embedding"
    work = "encoding"

    def __init__(self, model: EmbeddingModel | Any, emit: Callable[[object], None], **options: Any) -> None:
        super().__init__(model, emit, **options)
        self._waiting: deque[_Item] = deque()

    def warm_up(self) -> None:
        """Encode a short and a batched input once so kernels are built
        before the worker says Ready."""
        self._model.encode([[0, 1]])
        self._model.encode([[0, 1, 2]] * 4)

    def _busy(self) -> bool:
        return bool(self._waiting)

    def _count(self, counters: Counters) -> None:
        counters.waiting = len(self._waiting)

    def _open(self, job: EmbedJob) -> _Live:
        self._waiting.extend(_Item(job.request_id, i, ids) for i, ids in enumerate(job.inputs))
        return _Live(job, [None] * len(job.inputs), len(job.inputs), sum(len(ids) for ids in job.inputs))

    def _ended_tokens(self, live: _Live) -> int:
        return live.tokens

    def _end(self, request_ids: list[str], reason: str, kind: str | None = None, message: str | None = None) -> None:
        """End requests without their vectors (one terminal each) and drop
        their waiting inputs."""
        gone = set(request_ids)
        self._waiting = deque(item for item in self._waiting if item.request_id not in gone)
        super()._end(request_ids, reason, kind, message)

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
        for group in _groups(take):
            vectors = self._model.encode([item.tokens for item in group])
            for item, vector in zip(group, vectors):
                self._file(item, vector)
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
