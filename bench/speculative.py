"""Speculative decoding bench: prompt lookup on the edit and chat workloads.

The edit workload: a ~400-token Python file in the prompt and an
instruction to return it with one small change, greedy, so the answer
re-emits most of the prompt (what prompt-lookup drafting predicts). The
chat workload: a story prompt whose answer repeats little. Each runs the
same weights (default: the float32 copy of the default model, see
``bench/models.py``) in an mlxd gateway with ``speculative = "none"`` and
with ``"prompt_lookup"``, and the edit workload also in ``mlx_lm.server``
(settings as ``bench/compare.py``'s). Prints tokens/s, drafted and
accepted token counts, whether mlxd's texts are identical with and
without speculation (they must be), and issue #18's ratios as PASS/MISS
lines: edit single stream vs mlx_lm.server (>= 2), chat single stream vs
no speculation (>= 0.95: no slower within noise), edit at ``--streams``
(16) vs no speculation (>= 1.3).

Usage: ``python bench/speculative.py [--model DIR] [--max-tokens N]
[--streams S] [--rounds R] [--max-batch B] [--no-peer] [--draft SOURCE]``
(``--draft``: also a gateway drafting with that model): the speculative
gateway lets rows draft in batches of up to ``B`` rows (default: ``S``, so
the many-stream line measures verification at that batch size). Nothing here asserts: it prints
measurements and writes them to ``bench/results/speculative.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import mlx_lm_server, mlxd, ratio_line  # noqa: E402
from models import float32_model  # noqa: E402
from record import write as write_results  # noqa: E402

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


PEER_MODEL = "default_model"
"""The name ``mlx_lm.server`` serves its ``--model`` under."""

EDIT_PROMPT = (
    "Here is a Python file:\n\n```python\n" + code_file() + "```\n\n"
    "Rename the function `restock` to `replenish`. Reply with the whole updated file "
    "in one code block and nothing else."
)
CHAT_PROMPT = "Write a short story about a lighthouse keeper who finds a map inside a bottle."


def request(prompt: str, max_tokens: int, model: str = NAME) -> dict:
    """A greedy chat request for ``prompt`` to ``model``."""
    return {
        "model": model,
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


def best_rate(url: str, body: dict, streams: int, rounds: int) -> tuple[list[str], float]:
    """Best tokens/s over ``rounds`` rounds of ``streams`` copies of
    ``body`` (after one warm-up request), with the last round's texts."""
    asyncio.run(run(url, body, 1))
    best, texts = 0.0, []
    for _ in range(rounds):
        texts, tokens, wall = asyncio.run(run(url, body, streams))
        best = max(best, tokens / wall)
    return texts, best


def measure_mlxd(source: Path, mode: str, args: argparse.Namespace, tmp: Path) -> dict:
    """Every workload on one mlxd gateway with ``speculative = mode``:
    ``{workload: (texts, tok/s)}`` plus the worker counters under
    ``"stats"``."""
    model = {
        "name": NAME,
        "source": str(source),
        "speculative": mode,
        "max_batch_size": max(8, args.streams),
        "speculative_max_batch": args.max_batch or args.streams,
    }
    found: dict = {}
    with mlxd(tmp / mode, model) as server:
        found["edit"] = best_rate(server.url, request(EDIT_PROMPT, args.max_tokens), 1, args.rounds)
        found["chat"] = best_rate(server.url, request(CHAT_PROMPT, args.max_tokens), 1, args.rounds)
        found["edit-many"] = best_rate(server.url, request(EDIT_PROMPT, args.max_tokens), args.streams, args.rounds)
        time.sleep(1.5)  # one heartbeat
        found["stats"] = server.worker(NAME)["stats"]
    return found


def measure_peer(source: Path, args: argparse.Namespace, tmp: Path) -> tuple[list[str], float]:
    """The single-stream edit workload on ``mlx_lm.server``."""
    with mlx_lm_server(tmp / "peer", source) as peer:
        return best_rate(peer.url, request(EDIT_PROMPT, args.max_tokens, PEER_MODEL), 1, args.rounds)


def main() -> None:
    """Parse the options, run mlxd in both modes (and the peer), print the
    rates and the ratio lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="an MLX model directory (default: the float32 default model)")
    parser.add_argument("--max-tokens", type=int, default=450)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--max-batch", type=int, default=0, help="speculative_max_batch of the speculative gateway (0: --streams)"
    )
    parser.add_argument("--no-peer", action="store_true", help="skip mlx_lm.server")
    parser.add_argument("--draft", help="also run speculative = draft:DRAFT (a model source of the same tokenizer)")
    args = parser.parse_args()
    source = args.model or float32_model()
    with tempfile.TemporaryDirectory(prefix="mlxd-spec-bench-") as name:
        tmp = Path(name)
        plain = measure_mlxd(source, "none", args, tmp)
        spec = measure_mlxd(source, "prompt_lookup", args, tmp)
        drafted = measure_mlxd(source, f"draft:{args.draft}", args, tmp) if args.draft else None
        peer = None if args.no_peer else measure_peer(source, args, tmp)
    print(f"speculative decoding, {source.name}, max_tokens {args.max_tokens}")
    for workload, label in (
        ("edit", "edit, 1 stream"),
        ("chat", "chat, 1 stream"),
        ("edit-many", f"edit, {args.streams} streams"),
    ):
        print(f"  {label:<20} none {plain[workload][1]:8.1f} tok/s  prompt_lookup {spec[workload][1]:8.1f} tok/s")
        print(f"  {'':<20} identical text: {plain[workload][0] == spec[workload][0]}")
    if peer is not None:
        print(
            f"  {'edit, 1 stream':<20} mlx_lm.server {peer[1]:8.1f} tok/s  same text as mlxd: {peer[0] == plain['edit'][0]}"
        )
    stats = spec["stats"]
    print(f"  drafted {stats['draft_tokens']}, accepted {stats['draft_accepted_tokens']}")
    if drafted is not None:
        for workload in ("edit", "chat", "edit-many"):
            same = drafted[workload][0] == plain[workload][0]
            print(f"  {workload:<20} draft model {drafted[workload][1]:8.1f} tok/s  identical text: {same}")
        stats = drafted["stats"]
        print(f"  draft model drafted {stats['draft_tokens']}, accepted {stats['draft_accepted_tokens']}")
    print()
    print(
        ratio_line(
            "edit, 1 stream: mlxd prompt_lookup / mlx_lm.server", spec["edit"][1], peer[1] if peer else None, 2.0
        )
    )
    print(ratio_line("chat, 1 stream: mlxd prompt_lookup / mlxd none", spec["chat"][1], plain["chat"][1], 0.95))
    many = f"edit, {args.streams} streams: mlxd prompt_lookup / mlxd none"
    print(ratio_line(many, spec["edit-many"][1], plain["edit-many"][1], 1.3))
    workloads = []
    for workload, label in (
        ("edit", "edit, 1 stream"),
        ("chat", "chat, 1 stream"),
        ("edit-many", f"edit, {args.streams} streams"),
    ):
        row = {
            "workload": label,
            "none_tok_s": plain[workload][1],
            "prompt_lookup_tok_s": spec[workload][1],
            "identical_text": plain[workload][0] == spec[workload][0],
        }
        if drafted is not None:
            row["draft_model_tok_s"] = drafted[workload][1]
        if workload == "edit" and peer is not None:
            row["mlx_lm_server_tok_s"] = peer[1]
        workloads.append(row)
    write_results(
        "speculative",
        {
            "model": source.name,
            "max_tokens": args.max_tokens,
            "workloads": workloads,
            "drafted_tokens": spec["stats"]["draft_tokens"],
            "accepted_tokens": spec["stats"]["draft_accepted_tokens"],
        },
    )


if __name__ == "__main__":
    main()
