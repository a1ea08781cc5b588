"""Per-request samplers and logits processors for the batch engine.

Everything here builds MLX closures and must be called, like the closures
themselves, on the worker's scheduler thread.

Greedy requests share one sampler object, so a batch of greedy requests is
sampled in one batched call; any other request gets its own closure, which
mlx-lm's ``GenerationBatch`` calls on that request's row only. A seeded
request draws from its own PRNG key chain, so its output does not depend on
what else shares the batch.
"""

from __future__ import annotations

from typing import Callable

import mlx.core as mx
from mlx_lm.sample_utils import (
    apply_min_p,
    apply_top_k,
    apply_top_p,
    make_frequency_penalty,
    make_presence_penalty,
    make_repetition_penalty,
)

from shared.protocol import SamplingParams

Sampler = Callable[[mx.array], mx.array]
LogitsProcessor = Callable[[mx.array, mx.array], mx.array]

REPETITION_CONTEXT = 64
"""How many recent tokens (prompt included) the repetition penalty sees."""


def greedy(logprobs: mx.array) -> mx.array:
    """The shared greedy sampler: the arg-max token of every row."""
    return mx.argmax(logprobs, axis=-1)


def make_sampler(params: SamplingParams, choice: int = 0) -> Sampler | None:
    """Return the sampler for ``params``, or None for plain greedy decoding.

    None lets the engine use its shared batched greedy sampler. The returned
    closure takes log-probabilities of shape (1, vocab) and returns one token
    id per row. Temperature 0 is greedy whatever the other filters say.
    ``choice`` is the index of the choice among ``n``: a seeded request's
    choice ``i`` draws from seed ``seed + i``.
    """
    if params.temperature == 0.0:
        return None
    temperature = params.temperature
    top_k, top_p, min_p = params.top_k, params.top_p, params.min_p
    seed = None if params.seed is None else (params.seed + choice) % (1 << 64)
    key_state = [mx.random.key(seed)] if seed is not None else None

    def sample(logprobs: mx.array) -> mx.array:
        if 0 < top_k < logprobs.shape[-1]:  # k >= vocabulary size keeps everything
            logprobs = apply_top_k(logprobs, top_k)
        if min_p > 0.0:
            logprobs = apply_min_p(logprobs, min_p)
        if top_p < 1.0:
            logprobs = apply_top_p(logprobs, top_p)
        scaled = logprobs * (1.0 / temperature)
        if key_state is None:
            return mx.random.categorical(scaled)
        keys = mx.random.split(key_state[0])
        key_state[0] = keys[0]
        return mx.random.categorical(scaled, key=keys[1])

    return sample


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
