"""Admission: how the scheduler turns an :class:`~worker.messages.Admission`
into sequences of its engine.

A request's prompt starts from the longest reusable prefix in the prefix
cache; a prompt with images is prefilled with them first (unless a cached
prefix already covers every image token); a request with ``n`` choices is
prefilled once and each choice then decodes from its own copy. Each choice
gets its sampler and logits processors (penalties, biases, thinking budget,
grammar) and, for checkpointing caches, its prompt checkpoints.

:class:`Admitter` is a part of :class:`~worker.engine.scheduler.Scheduler`
(its base class), split out of the scheduler loop's module; it runs on the
scheduler thread and acts on the scheduler's batch state.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from worker.caches.prefix import Lookup, PrefixCache
from worker.engine.checkpoints import PromptCheckpoints
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
    """One choice of one request inside the engine."""

    request_id: str
    index: int
    top_logprobs: int | None  # None: no logprobs wanted


class Admitter:
    """The scheduler's admission of requests (see the module docstring).

    A base class of :class:`~worker.engine.scheduler.Scheduler`, whose
    constructor sets the state declared here; everything runs on the
    scheduler thread. Admitting a request inserts each of its choices into
    the engine, records them (``_seqs``, ``_uids``, ``_waiting_since``,
    ``_deadlines``) and emits :class:`~worker.messages.Started`; a request
    that cannot be admitted gets a ``Started`` then an ``internal`` error
    :class:`~worker.messages.Terminal` instead, and the loop goes on.
    """

    _engine: BatchEngine | None
    _emit: Callable[[object], None]
    _eos: list[int]
    _checkpoints: PromptCheckpoints
    _seqs: dict[int, Seq]
    _uids: dict[str, list[int]]
    _deadlines: dict[str, float]
    _waiting_since: dict[str, float]
    cache: PrefixCache | None
    counters: Counters
    speculation: Speculation | None

    def _admit(self, adm: Admission) -> None:
        try:
            uids, cached, from_disk = self._insert(adm)
        except Exception:  # a bad request must not take the worker down
            log.exception("could not admit %s", adm.request_id)
            self._emit(Started(adm.request_id, adm.n, len(adm.prompt), 0, [], adm.output))
            self._emit(Terminal(adm.request_id, "error", "internal", "the request could not be started"))
            return
        self._uids[adm.request_id] = uids
        self._waiting_since[adm.request_id] = adm.received or time.monotonic()
        if adm.deadline is not None:
            self._deadlines[adm.request_id] = adm.deadline
        self._emit(
            Started(adm.request_id, adm.n, len(adm.prompt), cached, list(adm.params.stop), adm.output, from_disk)
        )

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
            (uid,) = engine.insert_segments(
                [self._checkpoints.segments(remaining, done, marks)],
                max_tokens=[adm.max_tokens],
                caches=[cache] if cache is not None else None,
                all_tokens=[list(prompt[:done])],
                samplers=[make_sampler(params, choice=i)],
                logits_processors=[self._processors(adm, i)],
                stop_sequences=[stops],
            )
            engine.set_delta(uid, delta)
            if self.speculation is not None:
                self.speculation.begin(uid, adm.key_name, params.speculative)
            top = params.top_logprobs if params.logprobs else None
            self._seqs[uid] = Seq(adm.request_id, i, top)
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
