"""Throughput of a model on a tensor-parallel group vs one process.

Runs the same model in two mlxd gateways one after the other, first in one
process, then with ``tensor_parallel = --ranks`` (every rank on 127.0.0.1,
ring backend), sends ``--streams`` concurrent greedy completions per round,
and prints the best tokens/s of each, the ratio, and whether the texts are
identical (they must be). On one machine the group only adds all-reduces
between processes sharing its cores, so the ratio is expected below 1; the
number that matters is on two Macs (``--hosts``), see
docs/operations/tensor-parallel.md.

The default model is the tiny random-weight llama of the tests (4 heads:
SmolLM2-135M's 9 heads do not divide by 2; pass ``--model`` and ``--ranks
3`` for it). Usage: ``python bench/tensor_parallel.py [--model SOURCE]
[--ranks N] [--max-tokens N] [--streams S] [--rounds R] [--write]``. Nothing
here asserts: it prints measurements and with ``--write`` writes them to
``bench/results/tensor_parallel.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import mlxd  # noqa: E402
from bench.record import add_write_flag
from bench.record import write as write_results  # noqa: E402

NAME = "tp"
PROMPTS = ["The history of the printing press", "A recipe for bread:", "def quicksort(items):", "Dear diary, today"]


async def run(url: str, streams: int, max_tokens: int) -> tuple[list[str], int, float]:
    """``streams`` greedy completions at once; return the texts, the
    completion tokens and the wall seconds."""
    bodies = [
        {"model": NAME, "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": max_tokens, "temperature": 0}
        for i in range(streams)
    ]
    async with httpx.AsyncClient(timeout=1800) as client:
        started = time.perf_counter()
        replies = await asyncio.gather(*(client.post(f"{url}/v1/completions", json=b) for b in bodies))
        wall = time.perf_counter() - started
    data = [r.raise_for_status().json() for r in replies]
    return [d["choices"][0]["text"] for d in data], sum(d["usage"]["completion_tokens"] for d in data), wall


def measure(source: str, ranks: int, args: argparse.Namespace, tmp: Path) -> tuple[list[str], float]:
    """Best tokens/s over ``args.rounds`` rounds on ``ranks`` ranks (after
    one warm-up request), with the texts of the last round."""
    model = {"name": NAME, "source": source, "max_batch_size": max(8, args.streams), "tensor_parallel": ranks}
    with mlxd(tmp / f"ranks{ranks}", model) as server:
        asyncio.run(run(server.url, 1, 4))
        best, texts = 0.0, []
        for _ in range(args.rounds):
            texts, tokens, wall = asyncio.run(run(server.url, args.streams, args.max_tokens))
            best = max(best, tokens / wall)
    return texts, best


def main() -> None:
    """Parse the options, run one process then the group, print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_write_flag(parser)
    parser.add_argument("--model", default="", help="model source (default: the tests' tiny llama)")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlxd-tp-bench-") as tmp:
        source = args.model
        if not source:
            from tests.tiny_model import build_tiny_model

            source = str(build_tiny_model(Path(tmp) / "tiny"))
        one, one_rate = measure(source, 1, args, Path(tmp))
        group, group_rate = measure(source, args.ranks, args, Path(tmp))
    print(
        f"tensor parallel, {args.streams} stream(s), max_tokens {args.max_tokens}, model {args.model or 'tiny llama'}"
    )
    print(f"  1 process     {one_rate:8.1f} tok/s")
    print(f"  {args.ranks} ranks       {group_rate:8.1f} tok/s  ({group_rate / one_rate:.2f}x)")
    print(f"  identical text: {one == group}")
    if args.write:
        write_results(
            "tensor_parallel",
            {
                "model": args.model or "tiny llama",
                "streams": args.streams,
                "max_tokens": args.max_tokens,
                "one_process_tok_s": one_rate,
                "ranks": args.ranks,
                "group_tok_s": group_rate,
                "identical_text": one == group,
            },
        )


if __name__ == "__main__":
    main()
