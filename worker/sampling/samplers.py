"""Per-request samplers and logits processors for the batch engine.

Everything here that builds or runs MLX arrays must be called on the
worker's scheduler thread. A :class:`TokenSampler` also samples from NumPy
rows (the engine's host path on the CPU backend, see :mod:`worker.engine.batch_engine`);
that needs no thread but is, in practice, also the scheduler thread.

Plain greedy requests get no sampler (None): the engine takes the arg-max
of their raw logits in one batched call and never normalizes them. Every
other request (temperature above 0, or log-probabilities wanted) gets its
own :class:`TokenSampler`, which the engine calls on that request's row of
normalized log-probabilities only. A seeded request draws from its own
random stream, so its output does not depend on what else shares the batch.
"""

from __future__ import annotations

import math
from typing import Callable

import mlx.core as mx
import numpy as np
from mlx_lm.sample_utils import (
    apply_min_p,
    apply_top_k,
    apply_top_p,
    make_frequency_penalty,
    make_presence_penalty,
    make_repetition_penalty,
)

from shared.protocol import SamplingParams
from worker.messages import ThinkingBudget
from worker.sampling.reasoning_tokens import ReasoningBlock

Sampler = Callable[[mx.array], mx.array]
LogitsProcessor = Callable[[mx.array, mx.array], mx.array]

REPETITION_CONTEXT = 64
"""How many recent tokens (prompt included) the repetition penalty sees."""


def greedy(logits: mx.array) -> mx.array:
    """The shared greedy sampler: the arg-max token of every row.

    Works on raw logits as well as on log-probabilities (the arg-max is the
    same); the engine's fast path calls it on raw logits.
    """
    return mx.argmax(logits, axis=-1)


def host_log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax of a 2-D float array, in float32."""
    top = logits.max(axis=-1, keepdims=True)
    shifted = logits - top
    return (shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))).astype(np.float32, copy=False)


class TokenSampler:
    """How one choice picks its next token from a row of log-probabilities.

    ``temperature`` 0 means greedy (the other filters are then ignored);
    otherwise the row is filtered by ``top_k`` (0: off), ``min_p`` (0: off)
    and ``top_p`` (1: off), in that order and before the temperature, then
    sampled. ``logprobs`` tells the engine that this choice reports
    log-probabilities, so its row must be normalized even when greedy.
    ``seed`` (None: unseeded) fixes the random stream of this choice.

    :meth:`__call__` is the MLX form (the engine's device path) and
    :meth:`sample_host` the NumPy form (the host path); both draw from their
    own stream, created on first use. Not thread-safe; one engine row owns
    one sampler.
    """

    def __init__(
        self,
        temperature: float,
        top_k: int = 0,
        top_p: float = 1.0,
        min_p: float = 0.0,
        *,
        logprobs: bool = False,
        seed: int | None = None,
    ) -> None:
        self.temperature = temperature
        self.top_k = top_k
        self.top_p = top_p
        self.min_p = min_p
        self.logprobs = logprobs
        self.seed = seed
        self._key: mx.array | None = None
        self._rng: np.random.Generator | None = None

    @property
    def greedy(self) -> bool:
        """True when this sampler always takes the most likely token."""
        return self.temperature == 0.0

    def __call__(self, logprobs: mx.array) -> mx.array:
        """Sample one token id per row of ``logprobs`` (shape (rows, vocab))
        with MLX; returns an array of shape (rows,)."""
        if self.greedy:
            return mx.argmax(logprobs, axis=-1)
        if 0 < self.top_k < logprobs.shape[-1]:  # k >= vocabulary size keeps everything
            logprobs = apply_top_k(logprobs, self.top_k)
        if self.min_p > 0.0:
            logprobs = apply_min_p(logprobs, self.min_p)
        if self.top_p < 1.0:
            logprobs = apply_top_p(logprobs, self.top_p)
        scaled = logprobs * (1.0 / self.temperature)
        if self.seed is None:
            return mx.random.categorical(scaled)
        if self._key is None:
            self._key = mx.random.key(self.seed)
        keys = mx.random.split(self._key)
        self._key = keys[0]
        return mx.random.categorical(scaled, key=keys[1])

    def sample_host(self, logprobs: np.ndarray) -> int:
        """Sample one token id from one row of log-probabilities (a 1-D
        float NumPy array) on the host: filters, then inverse-CDF sampling
        with one uniform draw from this sampler's own generator."""
        if self.greedy:
            return int(np.argmax(logprobs))
        ids: np.ndarray | None = None  # None: the whole vocabulary
        values = logprobs
        if 0 < self.top_k < values.shape[0]:
            ids = np.argpartition(-values, self.top_k - 1)[: self.top_k]
            values = values[ids]
        if self.min_p > 0.0:
            keep = np.flatnonzero(values >= values.max() + math.log(self.min_p))
            ids = keep if ids is None else ids[keep]
            values = values[keep]
        if self.top_p < 1.0:
            keep = self._nucleus(values)
            ids = keep if ids is None else ids[keep]
            values = values[keep]
        scaled = values * (1.0 / self.temperature)
        weights = np.exp(scaled - scaled.max(), dtype=np.float64)
        cdf = np.cumsum(weights)
        if self._rng is None:
            self._rng = np.random.default_rng(self.seed)
        pick = int(np.searchsorted(cdf, self._rng.random() * cdf[-1], side="right"))
        pick = min(pick, cdf.shape[0] - 1)
        return int(pick if ids is None else ids[pick])

    def _nucleus(self, values: np.ndarray) -> np.ndarray:
        """Positions in ``values`` (log-probabilities) of the smallest set of
        most likely tokens whose mass reaches ``top_p``: a token stays when
        the tokens more likely than it hold less than ``top_p``. Only
        tokens above ``(1 - top_p) / len(values)`` of the mass can stay (the
        tokens at most as likely as one below that hold less than
        ``1 - top_p`` in all), so only those are sorted."""
        weights = np.exp(values - values.max())
        total = weights.sum()
        candidates = np.flatnonzero(weights >= total * (1.0 - self.top_p) / values.shape[0])
        order = candidates[np.argsort(-weights[candidates])]
        ranked = weights[order]
        above = np.cumsum(ranked) - ranked  # mass strictly more likely than each
        count = max(1, int(np.searchsorted(above, self.top_p * total, side="left")))
        return order[:count]


def make_sampler(params: SamplingParams, choice: int = 0) -> TokenSampler | None:
    """Return the sampler for ``params``, or None for plain greedy decoding
    without log-probabilities (the engine's batched fast path).

    Temperature 0 is greedy whatever the other filters say. ``choice`` is
    the index of the choice among ``n``: a seeded request's choice ``i``
    draws from seed ``seed + i``.
    """
    logprobs = params.logprobs
    if params.temperature == 0.0:
        return TokenSampler(0.0, logprobs=True) if logprobs else None
    seed = None if params.seed is None else (params.seed + choice) % (1 << 64)
    return TokenSampler(params.temperature, params.top_k, params.top_p, params.min_p, logprobs=logprobs, seed=seed)


def make_processors(params: SamplingParams, prompt_len: int, eos_ids: list[int]) -> list[LogitsProcessor]:
    """Return the logits processors ``params`` asks for (possibly none).

    ``prompt_len`` is the number of prompt tokens: presence and frequency
    penalties count only generated tokens (OpenAI semantics), the
    repetition penalty sees the last ``REPETITION_CONTEXT`` tokens of the
    whole sequence (mlx-lm semantics). Logit bias is added to every step.
    With ``min_tokens``, the ``eos_ids`` cannot be sampled before that many
    tokens were generated.
    """
    processors: list[LogitsProcessor] = []
    if params.min_tokens > 0 and eos_ids and not params.ignore_eos:
        processors.append(_min_tokens(params.min_tokens, prompt_len, eos_ids))
    if params.logit_bias:
        ids = mx.array(list(params.logit_bias.keys()), dtype=mx.int32)
        values = mx.array(list(params.logit_bias.values()), dtype=mx.float32)

        def bias(_tokens: mx.array, logits: mx.array) -> mx.array:
            return logits.at[:, ids].add(values.astype(logits.dtype))

        processors.append(bias)
    if params.repetition_penalty != 1.0:
        processors.append(make_repetition_penalty(params.repetition_penalty, REPETITION_CONTEXT))
    for penalty, factory in (
        (params.presence_penalty, make_presence_penalty),
        (params.frequency_penalty, make_frequency_penalty),
    ):
        if penalty != 0.0:
            processors.append(_generated_only(factory(penalty, 1 << 30), prompt_len))
    return processors


def _generated_only(processor: LogitsProcessor, prompt_len: int) -> LogitsProcessor:
    """Wrap ``processor`` so it sees only the tokens after the prompt."""

    def apply(tokens: mx.array, logits: mx.array) -> mx.array:
        generated = tokens[prompt_len:]
        if generated.size == 0:
            return logits
        return processor(generated, logits)

    return apply


def _min_tokens(minimum: int, prompt_len: int, eos_ids: list[int]) -> LogitsProcessor:
    """Forbid ``eos_ids`` until ``minimum`` tokens follow the prompt.

    The engine's context holds the prompt and every token fed so far, so
    ``len(tokens) - prompt_len`` tokens were generated before this step.
    """
    eos = mx.array(eos_ids, dtype=mx.int32)

    def apply(tokens: mx.array, logits: mx.array) -> mx.array:
        if tokens.shape[0] - prompt_len >= minimum:
            return logits
        return logits.at[:, eos].add(mx.array(-float("inf"), dtype=logits.dtype))

    return apply


def thinking_budget_processor(budget: ThinkingBudget, prompt_len: int) -> LogitsProcessor:
    """A logits processor that ends a reasoning block after
    ``budget.budget`` generated tokens (``budget`` is a
    :class:`worker.messages.ThinkingBudget`): from then on it allows only
    the next token of ``budget.close_ids`` until the block is closed. The
    block starts open when ``budget.open_at_start``, and opens whenever the
    model writes ``budget.open_ids``. ``prompt_len``: tokens of the prompt,
    which the engine's context starts with. Stateful: one per choice.
    """
    block = ReasoningBlock(budget.open_ids, budget.close_ids, budget.open_at_start)
    seen = [prompt_len]  # tokens of the context already fed to ``block``

    def apply(tokens: mx.array, logits: mx.array) -> mx.array:
        total = tokens.shape[0]
        if total > seen[0]:
            for token in tokens[seen[0] :].tolist():
                block.feed(int(token))
            seen[0] = total
        if not block.inside or block.used < budget.budget:
            return logits
        allowed = mx.arange(logits.shape[-1]) == block.next_close_token()
        return mx.where(allowed, logits, mx.array(-float("inf"), dtype=logits.dtype))

    return apply
