"""The batch engine: mlx-lm's ``BatchGenerator`` with mlxd's decode step.

:class:`BatchEngine` is the only place where mlx-lm's batching internals
(``BatchGenerator`` fields, generation batches, direct model calls, stop
sequences) are touched: the scheduler drives it through its public methods
(``insert_segments``, :meth:`BatchEngine.step`, ``remove``,
``extract_cache``, :meth:`BatchEngine.prefill`, :attr:`BatchEngine.running`,
:meth:`BatchEngine.stop_sequences`) and reads a step's log-probabilities
with :func:`response_logprobs`.

mlx-lm's ``GenerationBatch`` normalizes every row's logits to
log-probabilities at every step (a log-softmax over the whole vocabulary)
and then samples from them, whether or not any request asked for
log-probabilities. On the CPU backend that log-softmax costs more than the
forward pass of a small model (see ``bench/NOTES.md``). :class:`BatchEngine` is a
``BatchGenerator`` whose generation batches step differently:

* rows without a sampler (plain greedy, no log-probabilities) take the
  arg-max of their raw logits; nothing is normalized for them, and their
  ``Response.logprobs`` is None;
* rows with a :class:`~worker.sampling.samplers.TokenSampler` get a log-softmax of
  their own row only, and are sampled from it.

Where those rows are computed depends on ``host_sampling``. On the device
path (the default on Metal) the special rows are gathered into one small
MLX batch, and the step keeps mlx-lm's pipelining (the next step's tokens
are evaluated asynchronously while Python handles this one). On the host
path (the default on the CPU backend, where MLX's ``exp`` is ~26x slower
than NumPy's) a step that has any special row evaluates its logits, copies
them to NumPy and normalizes and samples there; a step of only plain rows
still runs entirely in MLX, pipelined.

With speculation on, a step in which rows have drafts is
:mod:`worker.speculation.step`'s (mixed into :class:`LeanGenerationBatch`).

Threads: everything here runs on the worker's scheduler thread (MLX streams
are thread-local). This module and :mod:`worker.speculation.step` rely on
mlx-lm internals (``PromptProcessingBatch.generate``,
``GenerationBatch._step`` and its fields, ``BatchKVCache``'s padding),
which is why ``pyproject.toml`` pins mlx-lm to one minor version.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import mlx.core as mx
import numpy as np
from mlx_lm.generate import BatchGenerator, GenerationBatch, PromptProcessingBatch, StopSequences, generation_stream
from mlx_lm.models.cache import make_prompt_cache

from worker.caches.quantized_batch import as_rows, plain_rows, quantized_prompt_cache
from worker.engine.solo_cache import SoloBatch, solo_caches
from worker.messages import TokenLogprobs
from worker.sampling.samplers import TokenSampler, host_log_softmax
from worker.speculation.drafting import Speculation
from worker.speculation.step import SpeculativeSteps

HOST_SAMPLING_ENV = "MLXD_HOST_SAMPLING"
"""Environment override of :func:`default_host_sampling`: ``1`` or ``0``."""


def engine_stream() -> Any:
    """The MLX stream every engine evaluates on (mlx-lm's generation stream,
    one per thread). Work that must stay ordered with the engine's own
    queued (asynchronously evaluated) steps runs on it, e.g. a
    tensor-parallel group's collectives (:mod:`worker.tensor_parallel.lockstep`)."""
    return generation_stream


def default_host_sampling() -> bool:
    """True when sampling should run on the host: the default device is the
    CPU, unless ``MLXD_HOST_SAMPLING`` says ``0`` (or ``1`` to force it on
    a GPU)."""
    forced = os.environ.get(HOST_SAMPLING_ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    return mx.default_device() == mx.cpu


class LeanGenerationBatch(SpeculativeSteps, GenerationBatch):
    """A ``GenerationBatch`` that normalizes only the rows that need it.

    ``host_sampling`` chooses the host (NumPy) or device (MLX) path for
    those rows. ``Response.logprobs`` is None for plain rows, a float32 MLX
    array (device path) or a float32 NumPy array (host path) of
    log-probabilities over the vocabulary for the others, whatever the
    model's dtype.
    """

    def __init__(self, *args: Any, host_sampling: bool = False, **kwargs: Any) -> None:
        self.host_sampling = host_sampling
        self.speculation: Speculation | None = None
        super().__init__(*args, **kwargs)

    def next(self) -> list[Any]:
        """One step: a speculative step when
        :meth:`~worker.speculation.step.SpeculativeSteps._speculate` takes it
        (rows with drafts verify them in the same forward as the others
        decode), else mlx-lm's step; either way the speculation's
        controller is told a step began (:meth:`Speculation.start_step`: it times
        steps from one start to the next)."""
        spec = self.speculation
        if spec is None or not self.uids:
            return super().next()
        spec.start_step(len(self.uids))
        responses = self._speculate(spec)
        return super().next() if responses is None else responses

    def _step(self) -> tuple[list[int], list[Any]]:
        self._current_tokens = self._next_tokens
        self._current_logprobs = self._next_logprobs
        inputs = self._current_tokens

        bind_rows(self.model, self.uids)
        logits = self.model(inputs[:, None], cache=self.prompt_cache)[:, -1, :]
        logits, token_context = self._process(logits, inputs)

        samplers = self.samplers or [self.fallback_sampler] * len(self.uids)
        special = [i for i, s in enumerate(samplers) if isinstance(s, TokenSampler)]
        if not special:
            sampled, rows = mx.argmax(logits, axis=-1), [None] * len(self.uids)
        elif self.host_sampling:
            sampled, rows = self._sample_host(logits, samplers, special)
        else:
            sampled, rows = self._sample_device(logits, samplers, special)

        self._next_tokens = sampled
        self._next_logprobs = rows
        pending = [r for r in rows if isinstance(r, mx.array)]
        mx.async_eval(self._next_tokens, pending, token_context)

        mx.eval(inputs, [r for r in self._current_logprobs if isinstance(r, mx.array)])
        tokens = inputs.tolist()
        for seen, token in zip(self.tokens, tokens):
            seen.append(token)
        return tokens, self._current_logprobs

    def _process(self, logits: mx.array, inputs: mx.array) -> tuple[mx.array, list[mx.array]]:
        """Apply each row's logits processors (penalties, biases, grammar) to
        its row; return the new logits and the token contexts they read."""
        token_context: list[mx.array] = []
        if not any(self.logits_processors):
            return logits, token_context
        processed = []
        for e in range(len(self.uids)):
            row = logits[e : e + 1]
            processors = self.logits_processors[e] or ()
            if processors:
                context = self._token_context[e].update_and_fetch(inputs[e : e + 1])
                token_context.append(context)
                for processor in processors:
                    row = processor(context, row)
            processed.append(row)
        return mx.concatenate(processed, axis=0), token_context

    @staticmethod
    def _sample_host(logits: mx.array, samplers: list[Any], special: list[int]) -> tuple[mx.array, list[Any]]:
        """Evaluate ``logits`` now and sample every row with NumPy."""
        host = np.asarray(logits.astype(mx.float32))
        tokens = host.argmax(axis=-1)
        rows: list[Any] = [None] * host.shape[0]
        normalized = host_log_softmax(host[special])
        for j, i in enumerate(special):
            rows[i] = normalized[j]
            tokens[i] = samplers[i].sample_host(normalized[j])
        return mx.array(tokens.astype(np.uint32)), rows

    @staticmethod
    def _sample_device(logits: mx.array, samplers: list[Any], special: list[int]) -> tuple[mx.array, list[Any]]:
        """Normalize and sample the ``special`` rows as one small MLX batch;
        the others take the arg-max of their logits. Rows are normalized in
        float32 whatever the model's dtype: half-precision log-probabilities
        lose the tail of the distribution, and NumPy cannot read bfloat16."""
        sampled = mx.argmax(logits, axis=-1)
        index = mx.array(special)
        chosen = logits[index].astype(mx.float32)
        normalized = chosen - mx.logsumexp(chosen, axis=-1, keepdims=True)
        picks = mx.concatenate([samplers[i](normalized[j : j + 1]) for j, i in enumerate(special)])
        sampled[index] = picks.astype(sampled.dtype)
        rows: list[Any] = [None] * logits.shape[0]
        for j, i in enumerate(special):
            rows[i] = normalized[j]
        return sampled, rows


class LeanPromptBatch(PromptProcessingBatch):
    """A ``PromptProcessingBatch`` that hands its finished prompts to a
    :class:`LeanGenerationBatch` (the class attribute ``host_sampling`` is
    passed on; :class:`BatchEngine` sets it on the subclass it uses)."""

    host_sampling = False

    def prompt(self, tokens: list[list[int]]) -> None:
        """mlx-lm's prompt step, after telling a vision model which
        sequences the rows are (see :func:`bind_rows`)."""
        bind_rows(self.model, self.uids)
        super().prompt(tokens)

    def generate(self, tokens: list[list[int]]) -> LeanGenerationBatch:
        """Prefill all but the last token of each of ``tokens`` (the rest of
        every prompt), then move every sequence of this batch into a new
        :class:`LeanGenerationBatch` (which samples its first token at
        once); this batch is left empty."""
        if any(len(t) > 1 for t in tokens):
            self.prompt([t[:-1] for t in tokens])
        batch = LeanGenerationBatch(
            self.model,
            self.uids,
            mx.array([t[-1] for t in tokens]),
            self.prompt_cache,
            self.tokens,
            self.samplers,
            self.fallback_sampler,
            self.logits_processors,
            self.stop_sequences,
            self.max_tokens,
            host_sampling=self.host_sampling,
        )
        self.uids, self.prompt_cache, self.tokens = [], [], []
        self.samplers, self.logits_processors, self.max_tokens = [], [], []
        return batch


class _HostPromptBatch(LeanPromptBatch):
    host_sampling = True


class BatchEngine(BatchGenerator):
    """mlx-lm's ``BatchGenerator`` with :class:`LeanGenerationBatch` steps.

    ``host_sampling`` (None: :func:`default_host_sampling`) picks where
    normalized rows are computed; ``stop_tokens`` are the end-of-sequence
    token sequences (see :meth:`stop_sequences`); every other argument is
    ``BatchGenerator``'s, and ``prefill_batch_size`` is the size of the
    chunks in which new prompts join while others decode (see
    :meth:`step`). Insert plain greedy rows with sampler None and every
    other row with a :class:`~worker.sampling.samplers.TokenSampler`.
    ``speculation`` (None: off) turns on prompt-lookup drafting, verified
    inside the shared batch (see :mod:`worker.speculation.step`).
    ``solo``: the model's cache cannot be batched (see
    :mod:`worker.engine.solo_cache`); every sequence runs on its model's own
    caches, one at a time (``completion_batch_size`` and
    ``prefill_batch_size`` are forced to 1).
    ``kv_bits`` (4 or 8; 0: off) and ``kv_group_size``: running sequences
    keep their plain KV layers quantized (see
    :mod:`worker.caches.quantized_batch`): every cache the engine makes
    (:meth:`new_cache`) quantizes from the first token, inserted caches
    join the batch as quantized rows, and extracted states are mlx-lm's
    ``QuantizedKVCache`` for those layers. The caller decides whether the
    model can take it (:func:`~worker.caches.quantized_batch.why_not_quantized`).
    Between two :meth:`step` calls every sequence's cache holds exactly the
    tokens its last progress response reported: a state copied then (a
    prompt checkpoint) is the state of that prefix.
    Construct and use it on the scheduler thread only.
    """

    def __init__(
        self,
        model: Any,
        *,
        host_sampling: bool | None = None,
        speculation: Speculation | None = None,
        stop_tokens: Sequence[Sequence[int]] | None = None,
        solo: bool = False,
        kv_bits: int = 0,
        kv_group_size: int = 64,
        **kwargs: Any,
    ) -> None:
        self.kv_bits = kv_bits
        self.kv_group_size = kv_group_size
        if solo:
            kwargs.update(completion_batch_size=1, prefill_batch_size=1)
        super().__init__(model, stop_tokens=stop_tokens, **kwargs)
        self.solo = solo
        self.host_sampling = default_host_sampling() if host_sampling is None else host_sampling
        prompt_class = _HostPromptBatch if self.host_sampling else LeanPromptBatch
        self._prompt_batch = prompt_class.empty(self.model, self.sampler, prefill_step_size=self.prefill_step_size)
        generation = LeanGenerationBatch.empty(self.model, self.sampler)
        generation.host_sampling = self.host_sampling
        generation.speculation = speculation
        self._generation_batch = generation
        self._prefill_chunk = self.prefill_batch_size
        self._eos_stops = StopSequences(stop_tokens)
        self._no_stops = StopSequences(None)

    def insert_segments(
        self,
        segments: list[list[list[int]]],
        max_tokens: list[int] | None = None,
        caches: list[list[Any] | None] | None = None,
        *rest: Any,
        **kwargs: Any,
    ) -> list[int]:
        """``BatchGenerator.insert_segments``, each sequence's caches given or
        fresh (:meth:`new_cache`). For a solo engine they are first given the
        batch-of-one operations (:func:`worker.engine.solo_cache.solo_caches`);
        with ``kv_bits`` their quantized layers become rows that merge into a
        quantized batch (:func:`~worker.caches.quantized_batch.as_rows`)."""
        if self.solo or self.kv_bits:
            caches = [c if c is not None else self.new_cache() for c in (caches or [None] * len(segments))]
            if self.kv_bits and not self.solo:
                caches = [as_rows(c, self.kv_bits, self.kv_group_size) for c in caches]
            if self.solo:
                caches = [solo_caches(c) for c in caches]
        return super().insert_segments(segments, max_tokens, caches, *rest, **kwargs)

    def new_cache(self) -> list[Any]:
        """A fresh prompt cache for the model: mlx-lm's
        ``make_prompt_cache``, with its plain KV layers quantized from the
        first token when ``kv_bits`` is set."""
        if self.kv_bits:
            return quantized_prompt_cache(self.model, self.kv_bits, self.kv_group_size, self.max_kv_size)
        return make_prompt_cache(self.model, self.max_kv_size)

    def extract_cache(self, uids: list[int]) -> dict[int, tuple[list[Any], list[int]]]:
        """``BatchGenerator.extract_cache``: each sequence's cache state and
        tokens. A solo engine returns plain cache classes also for a
        sequence not yet prefilled (whose caches mlx-lm hands back as they
        were inserted), so a stored state never carries the batch-of-one
        operations; likewise a quantized sequence not yet prefilled hands
        back mlx-lm's ``QuantizedKVCache`` layers, never the engine's rows."""
        results = super().extract_cache(uids)
        if self.solo:
            for uid, (cache, tokens) in results.items():
                results[uid] = ([c.extract(0) if isinstance(c, SoloBatch) else c for c in cache], tokens)
        if self.kv_bits:
            for uid, (cache, tokens) in results.items():
                results[uid] = (plain_rows(cache), tokens)
        return results

    def set_delta(self, uid: int, delta: int) -> None:
        """Sequence ``uid``'s positions run ``delta`` from its cache offset
        (a vision model's prompt with images; a no-op for other models and
        for 0)."""
        deltas = getattr(self.model, "deltas", None)
        if deltas is not None and delta:
            deltas[uid] = delta

    def drop_delta(self, uid: int) -> None:
        """Forget sequence ``uid``'s position delta (it left the engine)."""
        deltas = getattr(self.model, "deltas", None)
        if deltas is not None:
            deltas.pop(uid, None)

    def prefill_images(self, vision: Any) -> tuple[list[Any], int]:
        """A fresh cache holding all but the last of ``vision.model_ids``
        (a :class:`~worker.messages.VisionPrompt`), run with its images
        through the vision model, and the prompt's position delta."""
        cache = make_prompt_cache(self.model)
        with mx.stream(self.stream):
            self.model.prefill_images(
                vision.model_ids[:-1],
                vision.pixel_values,
                vision.image_grid_thw,
                cache,
                vision.pixel_values_videos,
                vision.video_grid_thw,
                vision.input_features,
                vision.input_features_mask,
                vision.image_inputs,
            )
            delta = self.position_delta(vision)
        mx.clear_cache()
        return cache, delta

    def position_delta(self, vision: Any) -> int:
        """The position delta of a prompt with images (see
        :mod:`worker.vision.model`)."""
        with mx.stream(self.stream):
            return self.model.position_delta(vision.model_ids, vision.image_grid_thw, vision.video_grid_thw)

    @property
    def running(self) -> int:
        """How many sequences are decoding (prompts still waiting for their
        prefill not counted)."""
        return len(self._generation_batch)

    def stop_sequences(self, ignore_eos: bool) -> StopSequences:
        """The stop sequences to insert a row with: the engine's
        ``stop_tokens``, or none when the row ignores end-of-sequence."""
        return self._no_stops if ignore_eos else self._eos_stops

    def step(self) -> tuple[list[Any], list[Any]]:
        """Run one engine step; return ``BatchGenerator.next``'s prompt
        progress and token responses.

        When nothing is decoding, every waiting prompt is prefilled at once
        (up to ``completion_batch_size``); otherwise new prompts join in
        chunks of the ``prefill_batch_size`` given at construction, so the
        running sequences keep producing tokens. A prompt whose prefill
        the previous step finished joins the decoding batch first (see
        :meth:`_start_prefilled`).
        """
        moved: list[Any] = []
        if len(self._generation_batch) > 0:
            with mx.stream(self._stream):
                moved = self._start_prefilled()
        decoding = len(self._generation_batch) > 0
        self.prefill_batch_size = self._prefill_chunk if decoding else self.completion_batch_size
        progress, responses = self.next()
        speculation = self._generation_batch.speculation
        if speculation is not None and (moved or progress):
            speculation.interrupted()
        return moved + progress, responses

    def _start_prefilled(self) -> list[Any]:
        """Move every prompt whose prefill an earlier step finished (only its
        last token is left) into the decoding batch, computing its first
        token; return their end-of-prompt progress responses.

        mlx-lm moves such a prompt only after the step's decode of the
        running batch, so its first token would wait one more decode step
        of the whole batch; moved here, before that decode, the first token
        comes out in this step's responses. It runs at the start of a step,
        never at the end of the one that finished the prefill: feeding the
        last prompt token advances the sequence's cache past the position
        that step's progress response reported, and the scheduler copies
        prompt checkpoints between steps."""
        ready = [i for i, seq in enumerate(self._currently_processing) if len(seq[0]) == 1 and len(seq[0][0]) == 1]
        if not ready:
            return []
        last_inputs = [self._currently_processing[i][0][0] for i in ready]
        totals = [self._currently_processing[i][2] for i in ready]
        self._currently_processing = [s for i, s in enumerate(self._currently_processing) if i not in ready]
        batch = self._prompt_batch.split(ready).generate(last_inputs)
        self._generation_batch.extend(batch)
        return [
            PromptProcessingBatch.Response(uid, (total, total), True, True) for uid, total in zip(batch.uids, totals)
        ]

    def prefill(self, cache: list[Any] | None, tokens: list[int], uid: int | None = None) -> list[Any]:
        """Feed ``tokens`` into ``cache`` (a fresh prompt cache for the model
        when None) outside any batch, in chunks of ``prefill_step_size`` on
        the engine's stream, evaluating each chunk (a host sync per chunk,
        as mlx-lm's own prefill); return the cache. ``uid``: the sequence
        whose position delta applies (see :meth:`set_delta`; None: none).
        A fresh cache is :meth:`new_cache`'s (quantized with ``kv_bits``)."""
        cache = cache if cache is not None else self.new_cache()
        step = self.prefill_step_size
        bind_rows(self.model, [uid] if uid is not None else [])
        with mx.stream(self.stream):
            for i in range(0, len(tokens), step):
                self.model(mx.array(tokens[i : i + step])[None], cache=cache)
                mx.eval([c.state for c in cache])
                mx.clear_cache()  # as mlx-lm's prefill: free each chunk's temporaries
        return cache


def bind_rows(model: Any, uids: list[int]) -> None:
    """Tell ``model`` which sequences the rows of its next forward passes
    are, when it keeps per-sequence positions
    (:class:`worker.vision.model.VisionLanguageModel`); other models
    have nothing to bind."""
    bind = getattr(model, "bind_rows", None)
    if bind is not None:
        bind(uids)


def response_logprobs(responses: list[Any], wants: list[int]) -> list[TokenLogprobs]:
    """Each response's token log-probability and its ``wants[i]`` top
    alternatives (highest first), computed with NumPy from the rows the
    engine normalized (float32 whatever the model's dtype; MLX rows are
    already evaluated: the engine returns a step's tokens only after
    evaluating their rows). Every response must carry a row (a sampled or
    log-probability row, see :class:`LeanGenerationBatch`)."""
    rows = np.stack([np.asarray(r.logprobs, dtype=np.float32) for r in responses])
    ids = np.array([r.token for r in responses])
    chosen = rows[np.arange(len(responses)), ids].tolist()
    k = max(wants)
    if k > 0:
        top_ids = np.argpartition(-rows, k - 1, axis=-1)[:, :k]
        top_vals = np.take_along_axis(rows, top_ids, axis=-1)
    result: list[TokenLogprobs] = []
    for j, want in enumerate(wants):
        top: list[tuple[int, float]] = []
        if want:
            pairs = zip(top_ids[j].tolist(), top_vals[j].tolist())
            top = sorted(pairs, key=lambda p: -p[1])[:want]
        result.append((chosen[j], top))
    return result
