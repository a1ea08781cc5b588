"""Admission: how the scheduler turns an :class:`~worker.messages.Admission`
into sequences of its engine.

A request's prompt starts from the longest reusable prefix in the prefix
cache; a prompt with images is prefilled with them first (unless a cached
prefix already covers every image token); a request with ``n`` choices is
prefilled once and each choice then decodes from its own copy. Each choice
gets its sampler and logits processors (penalties, biases, thinking budget,
grammar) and, for checkpointing caches, its prompt checkpoints.

Under a KV budget (see :mod:`worker.engine.kv_budget`) admission also
decides when: a request waits in the memory queue until its rows fit
beside the running ones; before each step the newest rows are preempted
while the rows are over the budget (a preempted choice keeps its sampler,
processors and the tokens it generated, and resumes first); a prompt that
cannot fit alone is refused with ``context_length_exceeded`` and an
output that could not is cut.

:class:`Admitter` is a part of :class:`~worker.engine.scheduler.Scheduler`
(its base class), split out of the scheduler loop's module; it runs on the
scheduler thread and acts on the scheduler's batch state.
"""

from __future__ import annotations

import copy
import logging
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

from worker.caches.prefix import Lookup, PrefixCache
from worker.engine.checkpoints import PromptCheckpoints
from worker.engine.kv_budget import KVLedger
from worker.messages import Admission, Counters, Started, Terminal
from worker.speculation.drafting import Speculation

if TYPE_CHECKING:  # loads MLX; imported on the scheduler thread
    from worker.engine.batch_engine import BatchEngine

log = logging.getLogger("mlxd.worker.scheduler")

PREFILL_UID = -1
"""The engine uid a lone prefill's position delta is bound to."""


def model_ids_only(
    processor: Callable[[Any, Any], Any],
    image_token_id: int,
    video_token_id: int | None = None,
    video_keys_from: int | None = None,
) -> Callable[[Any, Any], Any]:
    """``processor`` reading the tokens as the model does: a prompt's media
    cache keys (ids past the vocabulary, see :mod:`worker.vision.inputs`)
    read as the image token, those at or past ``video_keys_from`` (None:
    none) as the video token."""
    import mlx.core as mx

    def apply(tokens: Any, logits: Any) -> Any:
        keyed = tokens >= logits.shape[-1]
        read = mx.where(keyed, mx.array(image_token_id, dtype=tokens.dtype), tokens)
        if video_keys_from is not None and video_token_id is not None:
            read = mx.where(tokens >= video_keys_from, mx.array(video_token_id, dtype=tokens.dtype), read)
        return processor(read, logits)

    return apply


@dataclass
class Seq:
    """One choice of one request inside the engine: its ``admission``, the
    ``sampler`` and ``processors`` it was inserted with, the ``tokens`` its
    row started from (the prompt, or for a resumed choice the prompt and
    what it had generated before) and the ``max_tokens`` it was allowed
    from there; ``generated`` collects its tokens only under a KV budget
    (a preempted choice resumes from ``tokens + generated``)."""

    request_id: str
    index: int
    top_logprobs: int | None  # None: no logprobs wanted
    admission: Admission | None = None
    sampler: Any = None
    processors: list[Any] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    max_tokens: int = 0
    generated: list[int] = field(default_factory=list)


@dataclass
class Resumption:
    """A preempted choice waiting for memory to continue (see
    :meth:`Admitter._preempt`)."""

    seq: Seq

    @property
    def request_id(self) -> str:
        """The request the choice belongs to."""
        return self.seq.request_id


class Admitter:
    """The scheduler's admission of requests (see the module docstring).

    A base class of :class:`~worker.engine.scheduler.Scheduler`, whose
    constructor sets the state declared here; everything runs on the
    scheduler thread. Admitting a request inserts each of its choices into
    the engine, records them (``_seqs``, ``_uids``, ``_waiting_since``,
    ``_deadlines``) and emits :class:`~worker.messages.Started`; a request
    that cannot be admitted gets a ``Started`` then an ``internal`` error
    :class:`~worker.messages.Terminal` instead, and the loop goes on.
    Under a KV budget (``_ledger`` set) requests and preempted choices
    wait in ``_memory_queue``; a request there that never started is
    ended with a ``Started`` and its terminal (see :meth:`_end_unstarted`).
    """

    _engine: BatchEngine | None
    _emit: Callable[[object], None]
    _eos: list[int]
    _checkpoints: PromptCheckpoints
    _seqs: dict[int, Seq]
    _uids: dict[str, list[int]]
    _deadlines: dict[str, float]
    _waiting_since: dict[str, float]
    _ledger: KVLedger | None
    _memory_queue: deque[Admission | Resumption]
    _remove_keeping_state: Callable[[list[int]], None]
    cache: PrefixCache | None
    counters: Counters
    speculation: Speculation | None

    def _admit(self, adm: Admission) -> None:
        """Start ``adm`` now, or under a KV budget queue it until it fits
        (see :meth:`_admit_waiting`); a prompt that cannot fit even alone
        is refused, and an output that could not is cut to what fits."""
        if self._ledger is None:
            self._start(adm)
            return
        fitted = self._fit_alone(adm)
        if fitted is None:
            return
        self._memory_queue.append(fitted)
        if fitted.deadline is not None:
            self._deadlines[fitted.request_id] = fitted.deadline
        self._admit_waiting()
        if self._memory_queue and self._memory_queue[-1] is fitted:
            self.counters.kv_waited += 1

    def _start(self, adm: Admission) -> None:
        """Insert ``adm`` into the engine and announce it (``Started``)."""
        try:
            uids, cached, from_disk = self._insert(adm)
        except Exception:  # a bad request must not take the worker down
            log.exception("could not admit %s", adm.request_id)
            self._end_unstarted(adm, Terminal(adm.request_id, "error", "internal", "the request could not be started"))
            return
        self._uids[adm.request_id] = uids
        self._waiting_since[adm.request_id] = adm.received or time.monotonic()
        if adm.deadline is not None:
            self._deadlines[adm.request_id] = adm.deadline
        self._emit(
            Started(adm.request_id, adm.n, len(adm.prompt), cached, list(adm.params.stop), adm.output, from_disk)
        )

    def _end_unstarted(self, adm: Admission, terminal: Terminal) -> None:
        """End ``adm``, never started, with ``terminal`` (the output thread
        knows a request only once it has seen its ``Started``)."""
        self._emit(Started(adm.request_id, adm.n, len(adm.prompt), 0, [], adm.output))
        self._emit(terminal)

    # -- the KV budget ------------------------------------------------------------

    def _fit_alone(self, adm: Admission) -> Admission | None:
        """``adm`` with ``max_tokens`` cut to what one row may hold within
        the KV budget; None (the request ended with a
        ``context_length_exceeded`` error) when its prompt cannot fit."""
        ledger = self._ledger
        assert ledger is not None
        lone = ledger.lone_tokens()
        if len(adm.prompt) + 1 > lone:
            message = (
                f"the prompt ({len(adm.prompt)} tokens) needs more KV memory than this model's KV budget"
                f" ({ledger.budget} bytes) holds: at most {max(0, lone - 1)} prompt tokens fit"
            )
            self._end_unstarted(adm, Terminal(adm.request_id, "error", "context_length_exceeded", message))
            return None
        most = lone - len(adm.prompt)
        return replace(adm, max_tokens=most) if adm.max_tokens > most else adm

    def _admit_waiting(self) -> None:
        """Start waiting work (preempted choices first, then requests in the
        order they came) while it fits beside the running rows; the head
        always starts when nothing runs."""
        ledger, queue = self._ledger, self._memory_queue
        assert ledger is not None
        while queue:
            item = queue[0]
            if len(ledger) and not ledger.fits(_rows_of(item)):
                return
            queue.popleft()
            if isinstance(item, Resumption):
                self._resume(item.seq)
            else:
                self._start(item)

    def _fit_memory(self) -> None:
        """Before a step under a KV budget: preempt the newest rows (never
        one with images, never the last) while the rows are over the
        budget, start what now fits, and trim the prefix cache to the room
        the rows leave (one accounting for both)."""
        ledger = self._ledger
        if ledger is None:
            return
        while len(ledger) > 1 and ledger.over():
            uid = next((u for u in ledger.newest() if self._seqs[u].admission.vision is None), None)
            if uid is None:
                break
            self._preempt(uid)
        self._admit_waiting()
        if self.cache is not None:
            self.cache.fit(ledger.room())

    def _preempt(self, uid: int) -> None:
        """Take choice ``uid`` out of the engine, its state kept in the
        prefix cache (when there is one and the state fits; else it is
        recomputed), and queue it to resume first once memory frees."""
        seq = self._seqs.pop(uid)
        self._ledger.drop(uid)  # type: ignore[union-attr]
        self._uids[seq.request_id].remove(uid)
        self._engine.drop_delta(uid)  # type: ignore[union-attr]
        self._checkpoints.forget(uid)
        if self.speculation is not None:
            self.speculation.forget(uid)
        self._remove_keeping_state([uid])
        self._memory_queue.appendleft(Resumption(seq))
        self.counters.kv_preemptions += 1
        log.info(
            "preempted %s choice %d at %d tokens: KV budget",
            seq.request_id,
            seq.index,
            len(seq.tokens) + len(seq.generated),
        )

    def _resume(self, seq: Seq) -> None:
        """Insert preempted choice ``seq`` again: from its prompt and what it
        had generated, reusing the prefix cache, with the same sampler and
        logits processors, allowed what it had left."""
        adm = seq.admission
        assert adm is not None
        tokens = seq.tokens + seq.generated
        left = seq.max_tokens - len(seq.generated)
        found = self.cache.fetch(tokens) if self.cache else Lookup(None, 0, list(tokens))
        done = len(tokens) - len(found.remaining)
        self.counters.prompt_tokens += len(found.remaining)
        engine = self._engine
        (uid,) = engine.insert_segments(  # type: ignore[union-attr]
            [self._checkpoints.segments(found.remaining, done, set())],
            max_tokens=[left],
            caches=[found.cache] if found.cache is not None else None,
            all_tokens=[list(tokens[:done])],
            samplers=[seq.sampler],
            logits_processors=[seq.processors],
            stop_sequences=[engine.stop_sequences(adm.params.ignore_eos)],  # type: ignore[union-attr]
        )
        if self.speculation is not None:
            self.speculation.begin(uid, adm.key_name, adm.params.speculative)
        self._seqs[uid] = Seq(
            seq.request_id, seq.index, seq.top_logprobs, adm, seq.sampler, seq.processors, tokens, left
        )
        self._uids[seq.request_id].append(uid)
        self._checkpoints.track(uid, tokens, done, set())
        self._ledger.add(uid, len(tokens), left)  # type: ignore[union-attr]

    def _unqueue(self, request_id: str) -> Admission | None:
        """Drop ``request_id``'s work waiting for memory; return its
        admission when the request had not started."""
        unstarted = None
        kept: deque[Admission | Resumption] = deque()
        for item in self._memory_queue:
            if item.request_id != request_id:
                kept.append(item)
            elif isinstance(item, Admission):
                unstarted = item
        self._memory_queue = kept
        return unstarted

    def _waits_for_memory(self, request_id: str) -> bool:
        """Whether some choice of ``request_id`` waits for memory."""
        return any(item.request_id == request_id for item in self._memory_queue)

    def _unstarted_ids(self) -> list[str]:
        """Requests waiting for memory that have not started."""
        return [item.request_id for item in self._memory_queue if isinstance(item, Admission)]

    def _kv_waiting(self) -> int:
        """Choices waiting for memory."""
        return sum(len(_rows_of(item)) for item in self._memory_queue)

    def _insert(self, adm: Admission) -> tuple[list[int], int, int]:
        """Insert every choice of ``adm`` into the engine; return the uids,
        the number of prompt tokens reused from the prefix cache and how
        many of those came from its disk tier."""
        from worker.sampling.samplers import make_sampler

        prompt = adm.prompt
        found = self.cache.fetch(prompt) if self.cache else Lookup(None, 0, list(prompt))
        base, remaining = found.cache, found.remaining
        cached, from_disk, delta = found.cached, found.from_disk, 0
        engine = self._engine
        if adm.vision is not None:
            base, remaining, delta = self._vision_prefix(adm, base, remaining)
            if base is not found.cache:
                cached = from_disk = 0
        if adm.n > 1 and len(remaining) > 1:
            base = self._prefill(base, prompt, len(prompt) - len(remaining), delta)
            remaining = prompt[-1:]
        done = len(prompt) - len(remaining)
        self.counters.prompt_tokens += len(remaining)
        params = adm.params
        stops = engine.stop_sequences(params.ignore_eos)
        marks = self._checkpoints.marks_for(adm, done) if adm.n == 1 else set()
        uids = []
        for i in range(adm.n):
            cache = copy.deepcopy(base) if base is not None and adm.n > 1 else base
            sampler, processors = make_sampler(params, choice=i), self._processors(adm, i)
            (uid,) = engine.insert_segments(
                [self._checkpoints.segments(remaining, done, marks)],
                max_tokens=[adm.max_tokens],
                caches=[cache] if cache is not None else None,
                all_tokens=[list(prompt[:done])],
                samplers=[sampler],
                logits_processors=[processors],
                stop_sequences=[stops],
            )
            engine.set_delta(uid, delta)
            if self.speculation is not None:
                self.speculation.begin(uid, adm.key_name, params.speculative)
            top = params.top_logprobs if params.logprobs else None
            self._seqs[uid] = Seq(adm.request_id, i, top, adm, sampler, processors, list(prompt), adm.max_tokens)
            if self._ledger is not None:
                self._ledger.add(uid, len(prompt), adm.max_tokens)
            uids.append(uid)
            self._checkpoints.track(uid, prompt, done, marks)
        return uids, cached, from_disk

    def _vision_prefix(
        self, adm: Admission, base: list[Any] | None, remaining: list[int]
    ) -> tuple[Any, list[int], int]:
        """For a prompt with images: the cache to start from, the prompt
        tokens still to feed and the position delta. A cached prefix that
        covers every image token (keyed by the images' content, see
        :mod:`worker.vision.inputs`) is kept and the vision tower is not
        run; otherwise all but the last prompt token are prefilled with
        the images now (and that state kept in the prefix cache)."""
        vision = adm.vision
        engine = self._engine
        if len(adm.prompt) - len(remaining) >= vision.image_end:
            return base, remaining, engine.position_delta(vision)
        cache, delta = engine.prefill_images(vision)
        self.counters.prompt_tokens += len(adm.prompt) - 1
        self.counters.vision_prefills += 1
        self.counters.vision_image_tokens += vision.model_ids.count(vision.image_token_id)
        if vision.video_token_id is not None:
            self.counters.vision_image_tokens += vision.model_ids.count(vision.video_token_id)
        if self.cache is not None:
            self.cache.insert(list(adm.prompt[:-1]), copy.deepcopy(cache))
        return cache, list(adm.prompt[-1:]), delta

    def _processors(self, adm: Admission, choice: int) -> list[Any]:
        """The logits processors of one choice: sampling penalties and biases,
        then its grammar (last, so nothing can re-allow a masked token)."""
        from worker.sampling.constrained_decoding import after_marker, grammar_processor
        from worker.sampling.samplers import make_processors, thinking_budget_processor

        processors = make_processors(adm.params, len(adm.prompt), self._eos)
        if adm.vision is not None and processors:
            vision = adm.vision
            processors = [
                model_ids_only(p, vision.image_token_id, vision.video_token_id, vision.video_keys_from)
                for p in processors
            ]
        if adm.thinking_budget is not None:
            processors.append(thinking_budget_processor(adm.thinking_budget, len(adm.prompt)))
        if adm.matchers is not None:
            matcher = adm.matchers[choice]
            if adm.reasoning_close:
                processors.append(
                    after_marker(lambda start: grammar_processor(matcher, start), len(adm.prompt), adm.reasoning_close)
                )
            else:
                processors.append(grammar_processor(matcher, len(adm.prompt)))
        return processors

    def _prefill(self, cache: list[Any] | None, prompt: list[int], start: int, delta: int = 0) -> list[Any]:
        """Feed ``prompt[start:-1]`` into ``cache`` (a fresh one when None) so
        it covers all but the last prompt token; keep a copy in the prefix
        cache. Used to prefill once for all choices of an ``n`` > 1 request
        (``delta``: its position delta, see :mod:`worker.vision.model`)."""
        engine = self._engine
        engine.set_delta(PREFILL_UID, delta)  # type: ignore[union-attr]
        try:
            cache = engine.prefill(cache, prompt[start:-1], uid=PREFILL_UID)  # type: ignore[union-attr]
        finally:
            engine.drop_delta(PREFILL_UID)  # type: ignore[union-attr]
        if self.cache is not None:
            self.cache.insert(prompt[:-1], copy.deepcopy(cache))
        return cache


def _rows_of(item: Admission | Resumption) -> list[tuple[int, int]]:
    """The rows ``(tokens, left)`` that waiting ``item`` would start."""
    if isinstance(item, Resumption):
        seq = item.seq
        return [(len(seq.tokens) + len(seq.generated), seq.max_tokens - len(seq.generated))]
    return [(len(item.prompt), item.max_tokens)] * item.n
