"""Quantized live KV (``kv_bits``), measured in this process on the batch
engine (issue #45 part 2): for 16, 8 and 4 bits, the KV bytes per token
the KV budget books (:meth:`worker.engine.kv_budget.KVProfile.of_cache` on
the engine's own cache), the decode rate of ``--streams`` greedy streams
(median of ``--rounds`` rounds, the settings taking turns within each
round, so a slower spell of a shared machine hits them alike) and the
greedy agreement with full-precision KV: how many answers are identical,
and the mean position of the first differing token.

Prints one line per setting and the ratios against 16 bits; nothing is
asserted. Usage: ``python bench/kv_quant.py [--model DIR] [--streams N]
[--tokens T] [--rounds R] [--group-size G]`` (default model: the default
model's float32 copy, as mlx-lm loads it on the CPU backend).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

PROMPTS = (
    "Explain how a bicycle works.",
    "Write a short poem about the sea.",
    "What is the capital of France and why?",
    "List three uses of copper.",
    "Describe the water cycle.",
    "How do vaccines work?",
    "Give a recipe for pancakes.",
    "What is machine learning?",
)


def decode_round(model: Any, prompts: list[list[int]], tokens: int, bits: int, group: int) -> tuple[float, list]:
    """Greedy answers of ``tokens`` tokens to every prompt at once with
    ``kv_bits`` = ``bits`` (0: full precision); returns the decode rate
    (tokens/s from the step after every stream's first token) and the
    answers in prompt order."""
    from worker.engine.batch_engine import BatchEngine
    from worker.sampling.samplers import greedy

    n = len(prompts)
    engine = BatchEngine(
        model,
        host_sampling=True,
        stop_tokens=None,
        sampler=greedy,
        completion_batch_size=n,
        prefill_batch_size=n,
        kv_bits=bits,
        kv_group_size=group,
    )
    try:
        uids = engine.insert(prompts, max_tokens=[tokens] * n)
        answers: dict[int, list[int]] = {uid: [] for uid in uids}
        start, counted = None, 0
        while any(len(a) < tokens for a in answers.values()):
            _, responses = engine.step()
            for r in responses:
                answers[r.uid].append(r.token)
            if start is not None:
                counted += len(responses)
            elif all(answers.values()):
                start = time.perf_counter()
        return counted / (time.perf_counter() - start), [answers[u] for u in uids]
    finally:
        engine.close()


def bytes_per_token(model: Any, bits: int, group: int) -> int:
    """The KV bytes per token the KV budget books for ``model`` at ``bits``."""
    from worker.engine.batch_engine import BatchEngine
    from worker.engine.kv_budget import KVProfile
    from worker.sampling.samplers import greedy

    engine = BatchEngine(model, host_sampling=True, sampler=greedy, kv_bits=bits, kv_group_size=group)
    try:
        return KVProfile.of_cache(engine.prefill(None, [0]), engine.prefill_step_size).per_token
    finally:
        engine.close()


def main() -> None:
    """Parse the arguments, measure, print."""
    from shared.config import DEFAULT_MODEL_SOURCE
    from worker.caches.quantized_batch import why_not_quantized
    from worker.loading.loader import load_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL_SOURCE)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=64)
    args = parser.parse_args()

    loaded = load_model(args.model)
    model, group = loaded.model, args.group_size
    texts = [loaded.tokenizer.encode(t) for t in PROMPTS]
    prompts = [texts[i % len(texts)] + [100 + i] for i in range(args.streams)]
    settings = [0, 8, 4]
    for bits in settings[1:]:
        reason = why_not_quantized(model, bits, group)
        if reason:
            raise SystemExit(f"{bits}-bit live KV does not apply to this model: {reason}")
    rates: dict[int, list[float]] = {b: [] for b in settings}
    answers: dict[int, list] = {}
    for r in range(args.rounds):
        for bits in settings if r % 2 == 0 else reversed(settings):
            rate, answers[bits] = decode_round(model, prompts, args.tokens, bits, group)
            rates[bits].append(rate)
    sizes = {b: bytes_per_token(model, b, group) for b in settings}
    for bits in settings:
        line = f"{bits or 16:>2}-bit KV: {sizes[bits]} B/token, decode {statistics.median(rates[bits]):.1f} tok/s"
        if bits:
            first = [
                next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
                for a, b in zip(answers[0], answers[bits])
            ]
            line += (
                f" ({sizes[bits] / sizes[0]:.3f}x bytes, {statistics.median(rates[bits]) / statistics.median(rates[0]):.2f}x"
                f" decode; identical greedy answers {sum(k == args.tokens for k in first)}/{len(first)},"
                f" mean first difference at token {sum(first) / len(first):.1f} of {args.tokens})"
            )
        print(line, flush=True)


if __name__ == "__main__":
    main()
