"""Speculative decoding bench: the workloads of issue #32, speculation off
against the default config (``speculative = "auto"``: suffix drafting with
the drafting controller).

Workloads, greedy, each at 1 stream and at ``--streams`` (16) streams:

* ``copy``: copy a ~600-token log line by line (SmolLM2 copies a log,
  with a few changes, where it answers a request to repeat a code file
  with one line: the mechanism's ceiling);
* ``edit``: return a Python file with one rename (the model paraphrases
  part of it);
* ``agent``: a three-turn session whose later turns ask the model to
  re-emit the tool output (a file) it was shown and wrote before; each
  stream is its own session (its own file), turns one after the other;
* ``chat``: a story (little to copy);
* ``random``: continue a list of random words, sampled at temperature 1
  with a seed per stream (greedy output loops, which drafts would catch;
  sampled, nearly every draft misses: the worst case, where the controller
  must keep the cost within 3%).

Each runs the same weights (default: the float32 copy of the default
model, see ``bench/models.py``) in an mlxd gateway with ``speculative =
"none"`` and with the default config (no ``speculative`` key), started and
waited on ``/ready``; optionally (``--peer``) the 1-stream edit and copy
workloads also in ``mlx_lm.server``. Prints tokens/s per workload, whether
the texts are identical (they must be), the drafted/accepted counts and
the issue's targets as PASS/MISS lines. Nothing here asserts; results go
to ``bench/results/speculative.json``.

Usage: ``python bench/speculative.py [--model DIR] [--max-tokens N]
[--streams S] [--rounds R] [--workloads copy,edit,...] [--peer]
[--draft SOURCE]`` (``--draft``: also a gateway drafting with that model).
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


def log_document() -> str:
    """A deterministic server log of roughly 400 tokens."""
    events = ("started worker", "loaded model", "accepted request", "finished request", "freed cache")
    return "".join(
        f"2026-12-02 10:{i // 6:02d}:{i * 7 % 60:02d} INFO worker-{i % 3} {events[i % len(events)]} id={1000 + i}\n"
        for i in range(24)
    )


COPY_PROMPT = "Here is a log:\n\n" + log_document() + "\nCopy the log above exactly, line by line."
WORDS = ("amber", "quartz", "meadow", "violet", "engine", "harbor", "pencil", "glacier", "saddle", "orbit")


def random_prompt(seed: int) -> str:
    """Continue a list of pseudo-random words (nothing to copy)."""
    import random

    rng = random.Random(seed)
    return "Continue this list of random words: " + " ".join(rng.choice(WORDS) for _ in range(40))


def agent_file(session: int) -> str:
    """The file session ``session``'s tool returns (its own numbers)."""
    rows = [f"setting_{i} = {session * 100 + i}  # value of setting {i}" for i in range(30)]
    return "\n".join(rows) + "\n"


def agent_turns(session: int) -> list[str]:
    """The user turns of an agent session: read a file (given as a tool
    output), then re-emit it with changes, twice."""
    return [
        "The tool read_file returned this file:\n\n" + agent_file(session) + "\nShow me the file exactly as it is.",
        "Show the same file again, with setting_3 set to 0.",
        "Show the file once more, exactly as you last wrote it.",
    ]


def request(prompt: str | list[dict], max_tokens: int, model: str = NAME, **sampling: float) -> dict:
    """A chat request for ``prompt`` (text or messages) to ``model``: greedy
    unless ``sampling`` says otherwise."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    return {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, **sampling}


async def one(client: httpx.AsyncClient, url: str, body: dict) -> tuple[str, int]:
    """One request's text and completion tokens."""
    reply = (await client.post(f"{url}/v1/chat/completions", json=body)).raise_for_status().json()
    return reply["choices"][0]["message"]["content"] or "", reply["usage"]["completion_tokens"]


async def session(client: httpx.AsyncClient, url: str, index: int, max_tokens: int, model: str) -> tuple[str, int]:
    """One agent session, turn after turn; its texts joined and its tokens."""
    messages: list[dict] = []
    texts, tokens = [], 0
    for turn in agent_turns(index):
        messages.append({"role": "user", "content": turn})
        text, count = await one(client, url, request(list(messages), max_tokens, model))
        messages.append({"role": "assistant", "content": text})
        texts.append(text)
        tokens += count
    return "\n---\n".join(texts), tokens


async def run(url: str, workload: str, streams: int, max_tokens: int, model: str) -> tuple[list[str], int, float]:
    """``streams`` concurrent copies of ``workload``; the texts, the
    completion tokens and the wall seconds."""
    prompts = {"copy": COPY_PROMPT, "edit": EDIT_PROMPT, "chat": CHAT_PROMPT}
    async with httpx.AsyncClient(timeout=1800) as client:
        started = time.perf_counter()
        if workload == "agent":
            jobs = [session(client, url, i, max_tokens, model) for i in range(streams)]
        elif workload == "random":
            jobs = [
                one(client, url, request(random_prompt(i), max_tokens, model, temperature=1.0, seed=i))
                for i in range(streams)
            ]
        else:
            jobs = [one(client, url, request(prompts[workload], max_tokens, model)) for _ in range(streams)]
        done = await asyncio.gather(*jobs)
        wall = time.perf_counter() - started
    return [text for text, _ in done], sum(tokens for _, tokens in done), wall


def best_rate(url: str, workload: str, streams: int, args: argparse.Namespace, model: str = NAME) -> tuple[list, float]:
    """Best tokens/s over ``args.rounds`` rounds, with the last round's texts."""
    best, texts = 0.0, []
    for _ in range(args.rounds):
        texts, tokens, wall = asyncio.run(run(url, workload, streams, args.max_tokens, model))
        best = max(best, tokens / wall)
    return texts, best


def measure_mlxd(source: Path, mode: str | None, args: argparse.Namespace, tmp: Path) -> dict:
    """Every workload at 1 and ``args.streams`` streams on one mlxd gateway
    (``mode``: its ``speculative``; None: the default config):
    ``{(workload, streams): (texts, tok/s)}`` plus the worker counters
    under ``"stats"``."""
    model = {"name": NAME, "source": str(source), "max_batch_size": max(8, args.streams)}
    if mode is not None:
        model["speculative"] = mode
    found: dict = {}
    label = (mode or "default").replace(":", "-").replace("/", "-")
    with mlxd(tmp / label, model) as server:
        asyncio.run(run(server.url, "chat", 1, 8, NAME))  # warm-up: the first request's one-time costs
        for workload in args.workloads:
            for streams in sorted({1, args.streams}):
                found[(workload, streams)] = best_rate(server.url, workload, streams, args)
        time.sleep(1.5)  # one heartbeat
        found["stats"] = server.worker(NAME)["stats"]
    return found


def measure_peer(source: Path, args: argparse.Namespace, tmp: Path) -> dict:
    """The 1-stream copy and edit workloads on ``mlx_lm.server``."""
    with mlx_lm_server(tmp / "peer", source) as peer:
        return {(w, 1): best_rate(peer.url, w, 1, args, PEER_MODEL) for w in ("copy", "edit") if w in args.workloads}


TARGETS = {("agent", 1): 1.5, ("copy", 1): 2.5, ("copy", 16): 1.2, ("random", 1): 0.97, ("random", 16): 0.97}
"""Issue #32's targets, default config / speculation off; every other
workload at 16 streams: at least 1.0."""


def main() -> None:
    """Parse the options, run mlxd with speculation off and with the default
    config (and the peer), print the rates and the ratio lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="an MLX model directory (default: the float32 default model)")
    parser.add_argument("--max-tokens", type=int, default=300)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workloads", default="copy,edit,agent,chat,random")
    parser.add_argument("--peer", action="store_true", help="also mlx_lm.server (copy and edit, 1 stream)")
    parser.add_argument("--draft", help="also run speculative = draft:DRAFT (a model source of the same tokenizer)")
    args = parser.parse_args()
    args.workloads = [w for w in args.workloads.split(",") if w]
    source = args.model or float32_model()
    with tempfile.TemporaryDirectory(prefix="mlxd-spec-bench-") as name:
        tmp = Path(name)
        plain = measure_mlxd(source, "none", args, tmp)
        auto = measure_mlxd(source, None, args, tmp)
        drafted = measure_mlxd(source, f"draft:{args.draft}", args, tmp) if args.draft else None
        peer = measure_peer(source, args, tmp) if args.peer else {}
    print(f"speculative decoding, {source.name}, max_tokens {args.max_tokens}")
    rows, lines = [], []
    for workload in args.workloads:
        for streams in sorted({1, args.streams}):
            key = (workload, streams)
            label = f"{workload}, {streams} stream{'s' if streams > 1 else ''}"
            same = plain[key][0] == auto[key][0]
            print(
                f"  {label:<20} none {plain[key][1]:8.1f} tok/s  default {auto[key][1]:8.1f} tok/s  identical: {same}"
            )
            row = {"workload": label, "none_tok_s": plain[key][1], "auto_tok_s": auto[key][1], "identical_text": same}
            if drafted is not None:
                row["draft_model_tok_s"] = drafted[key][1]
            if key in peer:
                row["mlx_lm_server_tok_s"] = peer[key][1]
                print(f"  {'':<20} mlx_lm.server {peer[key][1]:8.1f} tok/s")
            rows.append(row)
            target = TARGETS.get((workload, 1 if streams == 1 else 16), 1.0 if streams > 1 else None)
            if target is not None:
                lines.append(ratio_line(f"{label}: default / speculation off", auto[key][1], plain[key][1], target))
    stats = auto["stats"]
    print(f"  drafted {stats['draft_tokens']}, accepted {stats['draft_accepted_tokens']}")
    print()
    print("\n".join(lines))
    write_results(
        "speculative",
        {
            "model": source.name,
            "max_tokens": args.max_tokens,
            "workloads": rows,
            "drafted_tokens": stats["draft_tokens"],
            "accepted_tokens": stats["draft_accepted_tokens"],
        },
    )


if __name__ == "__main__":
    main()
