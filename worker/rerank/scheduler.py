"""The scheduler thread of a rerank worker: batches query-document pairs
and scores them.

It is the embedding scheduler (:class:`~worker.embeddings.scheduler.EmbeddingScheduler`:
one first-come-first-served queue of inputs from every admitted request,
steps of up to ``max_batch_size`` pairs sorted by length and split by padded
tokens, one terminal output per request, deadlines, aborts, failure
handling) with pairs as its inputs and scores as its results: a request
whose pairs are all scored is answered with one
:class:`~shared.protocol.RequestOutput` holding ``scores`` in document
order. ``counters.rerank_pairs`` counts the pairs scored.

Threads: as the embedding scheduler's (``run`` and ``warm_up`` on the
scheduler thread, ``submit`` from any thread).
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.protocol import RequestOutput
from worker.embeddings.scheduler import EmbeddingScheduler, EmbedJob
from worker.rerank.model import Pair


@dataclass
class RerankJob(EmbedJob):
    """A tokenized rerank request (built on the input thread): ``inputs``
    are its :class:`~worker.rerank.model.Pair` s in document order
    (``dimensions`` unused)."""


class RerankScheduler(EmbeddingScheduler):
    """Runs a :class:`~worker.rerank.model.RerankModel` on the scheduler
    thread; see the module docstring."""

    def warm_up(self) -> None:
        """Score a short pair alone and four in a batch once so kernels
        are built before the worker says Ready."""
        self._model.encode([Pair([0, 1, 2], [0, 0, 0])])
        self._model.encode([Pair([0, 1, 2, 3], [0, 0, 0, 0])] * 4)

    def _answer(self, request_id: str, live) -> RequestOutput:  # type: ignore[no-untyped-def]
        """The scores of a request whose pairs are all scored."""
        scores = [float(score) for score in live.vectors]
        self.counters.rerank_pairs += len(scores)
        return RequestOutput(
            request_id=request_id,
            prompt_tokens=live.tokens,
            finish_reason="stop",
            scores=scores,
            queue_seconds=live.queue_seconds,
        )
