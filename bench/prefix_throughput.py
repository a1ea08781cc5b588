"""Prefix-cache and throughput benchmark: prefix-cache TTFT and aggregate throughput of mlxd.

Prints, from one run on this machine:
- time to first token of a request whose ~1,000-token prefix is already
  cached, against the same kind of request cold (target: warm <= 0.2x cold);
- aggregate completion tokens/s at 1, 8 and 16 concurrent streams.

Usage: ``.venv/bin/python bench/prefix_throughput.py [--model SOURCE] [--tokens N]``
(default: the real default model).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
from pathlib import Path

from harness import aggregate, concurrent, median, mlxd

from shared.config import DEFAULT_MODEL_SOURCE

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau".split()


def prefix(rng: random.Random, words: int = 700) -> str:
    """A random system prompt of about 1,000 tokens."""
    return " ".join(rng.choice(WORDS) for _ in range(words))


def chat(system: str, question: str, max_tokens: int) -> dict:
    """A greedy chat request body."""
    return {
        "model": "bench",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }


async def prefix_ttft(url: str, rounds: int) -> tuple[float, float, int]:
    """Median cold and warm TTFT over ``rounds``, and the cached tokens seen."""
    rng = random.Random(0)
    cold, warm, cached = [], [], 0
    for i in range(rounds):
        system = prefix(rng)
        (first,), _ = await concurrent(url, [chat(system, f"question {i}?", 1)])
        cold.append(first.ttft)
        (second,), _ = await concurrent(url, [chat(system, f"another question {i}?", 1)])
        warm.append(second.ttft)
        cached = second.cached
    return median(cold), median(warm), cached


async def throughput(url: str, streams: int, tokens: int) -> float:
    """Aggregate tokens/s of ``streams`` concurrent requests."""
    bodies = [
        chat("You are terse.", f"Write a story about number {i}.", tokens) | {"ignore_eos": True}
        for i in range(streams)
    ]
    results, wall = await concurrent(url, bodies)
    return aggregate(results, wall)


async def run(url: str, tokens: int) -> None:
    """Measure and print the table."""
    cold, warm, cached = await prefix_ttft(url, rounds=3)
    print(
        f"prefix cache: cold TTFT {cold * 1000:.0f} ms, warm {warm * 1000:.0f} ms "
        f"({cached} cached tokens): warm/cold = {warm / cold:.2f}x (target <= 0.20x)"
    )
    await throughput(url, 2, 4)  # warm-up
    base = None
    for streams in (1, 8, 16):
        rate = await throughput(url, streams, tokens)
        base = base or rate
        print(f"{streams:>2} streams: {rate:7.1f} tok/s aggregate ({rate / base:.2f}x one stream)")


def main() -> None:
    """Parse arguments, start mlxd, run the benchmark."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=DEFAULT_MODEL_SOURCE)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        with mlxd(Path(tmp), {"name": "bench", "source": args.model, "max_batch_size": 16}) as server:
            asyncio.run(run(f"{server.url}/v1/chat/completions", args.tokens))


if __name__ == "__main__":
    main()
