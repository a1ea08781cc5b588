"""Quantized live KV (``kv_bits``), measured in this process on the batch
engine (issue #45 part 3), on two models: the default model (float32, as
mlx-lm loads it on the CPU backend) with short chat prompts, and a
long-context tiny random-weight llama whose KV dominates its compute
(4 layers x 8 KV heads x 64 dims, ``--long-context`` tokens per prompt).

For full precision, 8 and 4 bits and each model it prints:

* the KV bytes per token the KV budget books
  (:meth:`worker.engine.kv_budget.KVProfile.of_cache` on the engine's own
  cache) and the ratio against full precision;
* the decode rate of ``--streams`` greedy streams (median of ``--rounds``
  rounds, the settings taking turns within each round, so a slower spell of
  a shared machine hits them alike) and the ratio against full precision (the
  issue's target: >= 0.90x);
* for the default model, answer quality against full-precision KV: how
  many greedy answers are identical, the mean position of the first
  differing token, and the mean log-likelihood per token of a fixed text
  (:data:`TEXT`, fed in chunks of ``--chunk`` tokens so later chunks read
  the earlier ones' KV as it is kept) with its difference from full
  precision.

Nothing is asserted. Usage: ``python bench/kv_quant.py [--streams 16]
[--tokens 64] [--rounds 2] [--group-size 64] [--long-context 1024]
[--write]``; a smoke run: ``--streams 2 --tokens 8 --rounds 1
--long-context 256``. With ``--write`` the numbers go to
``bench/results/kv_quant.json``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import ratio_line  # noqa: E402
from record import add_write_flag  # noqa: E402
from record import write as write_results  # noqa: E402

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

TEXT = (
    "The water cycle describes how water moves between the oceans, the air and the land. "
    "Heat from the sun evaporates water from the surface of the sea, lakes and rivers, and plants "
    "release water vapour through their leaves. The warm, moist air rises and cools, and the vapour "
    "condenses into tiny droplets that form clouds. When the droplets grow heavy enough they fall as "
    "rain, snow or hail. Some of that water runs off into streams and rivers and back to the sea; some "
    "soaks into the ground, where it feeds springs and wells and slowly flows towards the coast. "
    "Snow that falls on high mountains can stay frozen in glaciers for thousands of years before it "
    "melts. The cycle has no beginning and no end, and the total amount of water on the planet stays "
    "almost the same, although where it is and in what form changes with the seasons and the climate. "
    "People depend on the cycle for drinking water, farming and energy, and changes to it, such as "
    "longer droughts or heavier storms, affect cities and farms around the world. Scientists measure "
    "rainfall, river flows and the moisture in soil to understand how the cycle is changing and to "
    "plan how water is stored and shared between the people and the places that need it."
)
"""The fixed text whose log-likelihood is compared (about 250 tokens)."""

LONG_KV = {
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "max_position_embeddings": 32768,
}
"""The long-context tiny llama's config overrides: 16 KiB of float32 KV
per token against about 28 MiB of weights, so at long context reading the
KV is most of a decode step."""

PREFILL_STEP = 256
"""Prompt tokens per prefill chunk: the long prompts' attention scores stay
small (all streams are prefilled together)."""

SETTINGS = (0, 8, 4)
"""``kv_bits`` settings compared (0: full precision, the model's dtype:
float32 for both models here, as on the CPU backend)."""

BYTES_TARGET = {8: 0.57, 4: 0.29}
"""KV bytes per token against full precision, at most: a float16 model's
(the usual dtype on a Mac) 8 / 4 bits plus a float16 scale and bias per 64
values are 68 / 36 bytes per 128; a float32 model's 72 / 40 per 256."""


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
        prefill_step_size=PREFILL_STEP,
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


def mean_log_likelihood(model: Any, tokens: list[int], bits: int, group: int, chunk: int) -> float:
    """Mean log-probability (nats) of each of ``tokens`` after the first,
    given the ones before, fed in chunks of ``chunk`` tokens through the
    prompt cache the batch engine makes at ``bits`` (0: full precision),
    so every chunk after the first reads the earlier chunks' KV as kept."""
    import mlx.core as mx

    from worker.caches.quantized_batch import quantized_prompt_cache

    if bits:
        cache = quantized_prompt_cache(model, bits, group)
    else:
        from mlx_lm.models.cache import make_prompt_cache

        cache = make_prompt_cache(model)
    total, count = 0.0, 0
    for start in range(0, len(tokens) - 1, chunk):
        piece = tokens[start : start + chunk]
        logits = model(mx.array([piece]), cache=cache)[0].astype(mx.float32)
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        following = tokens[start + 1 : start + 1 + len(piece)]
        picked = mx.take_along_axis(logprobs[: len(following)], mx.array(following)[:, None], axis=-1)
        total += float(picked.sum())
        count += len(following)
    return total / count


def measure(model: Any, prompts: list[list[int]], args: argparse.Namespace) -> dict[int, dict]:
    """Bytes per token, decode rates (``args.rounds`` interleaved rounds)
    and answers of ``model`` on ``prompts`` for every setting."""
    from worker.caches.quantized_batch import why_not_quantized

    for bits in SETTINGS[1:]:
        reason = why_not_quantized(model, bits, args.group_size)
        if reason:
            raise SystemExit(f"{bits}-bit live KV does not apply to this model: {reason}")
    found: dict[int, dict] = {b: {"rates": []} for b in SETTINGS}
    for r in range(args.rounds):
        for bits in SETTINGS if r % 2 == 0 else tuple(reversed(SETTINGS)):
            rate, found[bits]["answers"] = decode_round(model, prompts, args.tokens, bits, args.group_size)
            found[bits]["rates"].append(rate)
    for bits in SETTINGS:
        found[bits]["bytes_per_token"] = bytes_per_token(model, bits, args.group_size)
        found[bits]["rate"] = statistics.median(found[bits]["rates"])
    return found


def agreement(full: list[list[int]], quantized: list[list[int]]) -> tuple[int, float]:
    """How many answers are identical, and the mean index of the first
    differing token (an identical answer counts its length)."""
    first = [next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a)) for a, b in zip(full, quantized)]
    return sum(k == len(a) for k, a in zip(first, full)), sum(first) / len(first)


def report(name: str, found: dict[int, dict], quality: dict[int, float] | None, tokens: int) -> dict:
    """Print ``name``'s lines and ratios; return them as a dict for the record."""
    base = found[0]
    record: dict[str, Any] = {}
    for bits in SETTINGS:
        row = found[bits]
        line = f"{name}, {f'{bits}-bit' if bits else 'full-precision'} KV: {row['bytes_per_token']} B/token, decode {row['rate']:.1f} tok/s"
        entry = {"bytes_per_token": row["bytes_per_token"], "decode_tokens_per_s": row["rate"], "rounds": row["rates"]}
        if quality is not None:
            line += f", log-likelihood {quality[bits]:.4f} nats/token"
            entry["log_likelihood"] = quality[bits]
        if bits:
            same, first = agreement(base["answers"], row["answers"])
            line += (
                f"; identical greedy answers {same}/{len(row['answers'])}, first difference at {first:.1f} of {tokens}"
            )
            entry.update(identical_answers=same, mean_first_difference=first)
            if quality is not None:
                line += f", log-likelihood change {quality[bits] - quality[0]:+.4f}"
                entry["log_likelihood_change"] = quality[bits] - quality[0]
        print(line, flush=True)
        record[f"{bits}-bit" if bits else "full"] = entry
    for bits in SETTINGS[1:]:
        row = found[bits]
        target = BYTES_TARGET[bits]
        print(
            ratio_line(
                f"{name}: KV bytes per token {bits}-bit / full",
                row["bytes_per_token"],
                base["bytes_per_token"],
                target,
                at_most=True,
            )
        )
        print(ratio_line(f"{name}: decode {bits}-bit / full", row["rate"], base["rate"], 0.90))
    return record


def main() -> None:
    """Parse the arguments, measure both models, print (and record)."""
    from models import float32_model

    from tests.tiny_model import build_tiny_model
    from worker.loading.loader import load_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=64)
    parser.add_argument("--chunk", type=int, default=64, help="tokens per forward pass for the log-likelihood")
    parser.add_argument("--long-context", type=int, default=1024, help="prompt tokens of the tiny model's streams")
    add_write_flag(parser)
    args = parser.parse_args()

    loaded = load_model(str(float32_model()))
    texts = [loaded.tokenizer.encode(t) for t in PROMPTS]
    prompts = [texts[i % len(texts)] + [100 + i] for i in range(args.streams)]
    found = measure(loaded.model, prompts, args)
    text = loaded.tokenizer.encode(TEXT)
    quality = {b: mean_log_likelihood(loaded.model, text, b, args.group_size, args.chunk) for b in SETTINGS}
    results = {"default model, short prompts": report("default model", found, quality, args.tokens)}
    del loaded

    with tempfile.TemporaryDirectory(prefix="mlxd-kv-quant-") as tmp:
        tiny = load_model(str(build_tiny_model(Path(tmp) / "long", overrides=LONG_KV))).model
        rng = random.Random(0)
        long_prompts = [[rng.randint(5, 5000) for _ in range(args.long_context)] for _ in range(args.streams)]
        found = measure(tiny, long_prompts, args)
    name = f"tiny llama, {args.long_context}-token prompts"
    results[name] = report(name, found, None, args.tokens)
    if args.write:
        write_results(
            "kv_quant",
            {
                "streams": args.streams,
                "tokens": args.tokens,
                "rounds": args.rounds,
                "group_size": args.group_size,
                "results": results,
            },
        )


if __name__ == "__main__":
    main()
