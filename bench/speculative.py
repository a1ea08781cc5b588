"""Edit workload for prompt-lookup speculative decoding.

A ~400-token Python file in the prompt and an instruction to return it
with one small change, greedy: the answer re-emits most of the prompt,
which is what prompt-lookup drafting predicts. Runs the same model in two
mlxd gateways, ``speculative = "none"`` and ``"prompt_lookup"``, one
after the other, with ``--streams`` concurrent copies of the request
(default 1), and prints tokens/s for each, the ratio, the drafted and
accepted token counts, and whether the texts are identical (they must be).

Usage: ``python bench/speculative.py [--model SOURCE] [--max-tokens N]
[--streams S] [--rounds R]``. Nothing here asserts: it prints measurements.
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
from shared.config import DEFAULT_MODEL_SOURCE  # noqa: E402

NAME = "edit"


def code_file() -> str:
    """A deterministic Python module of roughly 400 tokens."""
    parts = ['"""Inventory helpers."""\n\nfrom dataclasses import dataclass\n\n']
    parts.append("@dataclass\nclass Item:\n    name: str\n    price: float\n    quantity: int\n\n")
    for name, op in (("total", "+"), ("largest", "max"), ("cheapest", "min")):
        parts.append(
            f"def {name}_value(items: list[Item]) -> float:\n"
            f'    """Return the {name} value of the items."""\n'
            "    result = 0.0\n"
            "    for item in items:\n"
            "        value = item.price * item.quantity\n"
            + ("        result = result + value\n" if op == "+" else f"        result = {op}(result, value)\n")
            + "    return result\n\n"
        )
    parts.append(
        "def restock(items: list[Item], amount: int) -> list[Item]:\n"
        '    """Return copies of the items with their quantity raised by amount."""\n'
        "    return [Item(i.name, i.price, i.quantity + amount) for i in items]\n\n"
        "def names(items: list[Item]) -> list[str]:\n"
        '    """Return the item names, sorted."""\n'
        "    return sorted(item.name for item in items)\n"
    )
    return "".join(parts)


def request(max_tokens: int) -> dict:
    """The edit request: return the file with ``restock`` renamed."""
    prompt = (
        "Here is a Python file:\n\n```python\n" + code_file() + "```\n\n"
        "Rename the function `restock` to `replenish`. Reply with the whole updated file "
        "in one code block and nothing else."
    )
    return {
        "model": NAME,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }


async def run(url: str, body: dict, streams: int) -> tuple[list[str], int, float]:
    """Send ``streams`` copies of ``body`` at once; return the texts, the
    completion tokens and the wall seconds."""
    async with httpx.AsyncClient(timeout=600) as client:
        started = time.perf_counter()
        replies = await asyncio.gather(*(client.post(f"{url}/v1/chat/completions", json=body) for _ in range(streams)))
        wall = time.perf_counter() - started
    data = [r.raise_for_status().json() for r in replies]
    return (
        [d["choices"][0]["message"]["content"] for d in data],
        sum(d["usage"]["completion_tokens"] for d in data),
        wall,
    )


def measure(source: str, mode: str, args: argparse.Namespace, tmp: Path) -> tuple[list[str], float, dict]:
    """Best tokens/s over ``args.rounds`` rounds for one ``speculative`` mode
    (after one warm-up request), with the texts and the worker counters."""
    model = {"name": NAME, "source": source, "speculative": mode, "max_batch_size": max(8, args.streams)}
    with mlxd(tmp / mode, model) as server:
        body = request(args.max_tokens)
        asyncio.run(run(server.url, body, 1))
        best, texts = 0.0, []
        for _ in range(args.rounds):
            texts, tokens, wall = asyncio.run(run(server.url, body, args.streams))
            best = max(best, tokens / wall)
        time.sleep(1.5)  # one heartbeat
        stats = server.worker(NAME)["stats"]
    return texts, best, stats


def main() -> None:
    """Parse the options, run both modes, print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL_SOURCE)
    parser.add_argument("--max-tokens", type=int, default=450)
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlxd-spec-bench-") as tmp:
        plain, plain_rate, _ = measure(args.model, "none", args, Path(tmp))
        spec, spec_rate, stats = measure(args.model, "prompt_lookup", args, Path(tmp))
    print(f"edit workload, {args.streams} stream(s), max_tokens {args.max_tokens}")
    print(f"  speculative none          {plain_rate:8.1f} tok/s")
    print(f"  speculative prompt_lookup {spec_rate:8.1f} tok/s  ({spec_rate / plain_rate:.2f}x)")
    print(f"  drafted {stats['draft_tokens']}, accepted {stats['draft_accepted_tokens']}")
    print(f"  identical text: {plain == spec}")


if __name__ == "__main__":
    main()
