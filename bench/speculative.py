"""Speculative decoding bench: the default config (``speculative =
"auto"``: suffix drafting with the drafting controller) against the same
server with ``speculative = "none"``, A/B interleaved in one run.

Cases (issue #42), each a workload at a number of concurrent streams:

* ``short``: greedy chat answers of 64 tokens to distinct prompts of
  about 20 words (no shared prefix beyond the chat template), at 1, 8
  and 16 streams: where speculation used to lose under concurrency;
* ``story``: a story sampled at temperature 1 with a seed per stream, at
  8 streams (drafts nearly always miss);
* ``agent``: a three-turn session whose later turns ask the model to
  re-emit the tool output (a file) it was shown and wrote before, 1
  stream, also against ``mlx_lm.server``;
* ``copy``: copy a ~600-token log line by line, 1 stream, also against
  ``mlx_lm.server``;
* with ``--all``, also ``edit`` (return a Python file with one rename)
  and ``random`` (continue a list of random words, sampled) at 1 and 16
  streams.

Both mlxd gateways (the float32 copy of the default model, otherwise the
default config; ``bench/models.py``) and, for the agent and copy cases,
``mlx_lm.server`` on the same weights, run side by side, each started and
waited on ``/ready``; every round runs the case on each side in turn, the
order alternating between rounds; a side's rate is the median of its
rounds. Prints tokens/s, whether greedy texts are identical (they must
be), the controller's step counts, and PASS/MISS lines: every case at
least 0.97x of speculation off; agent at least 1.5x and copy at least
1.7x of ``mlx_lm.server``. Nothing here asserts; with ``--write`` results go to
``bench/results/speculative.json``.

Usage: ``python bench/speculative.py [--model DIR] [--rounds R]
[--cases short,story,...] [--all] [--no-peer]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import median, mlx_lm_server, mlxd, ratio_line  # noqa: E402
from models import float32_model  # noqa: E402
from record import add_write_flag
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


SHORT_TOPICS = (
    "rivers", "bread", "chess", "volcanoes", "owls", "trains", "glass", "bees",
    "tea", "kites", "moons", "ink", "salt", "maps", "bells", "clocks",
)  # fmt: skip


def short_prompt(i: int) -> str:
    """A distinct question of about 20 words."""
    topic = SHORT_TOPICS[i % len(SHORT_TOPICS)]
    return (
        f"In a few sentences, tell me something interesting about {topic} "
        f"and why people in many places still care about them today (question {i})."
    )


@dataclass(frozen=True)
class Case:
    """One bench case: ``workload`` at ``streams`` streams of ``max_tokens``;
    ``peer_target``: the least default / mlx_lm.server ratio (None: no peer)."""

    workload: str
    streams: int
    max_tokens: int
    peer_target: float | None = None

    @property
    def label(self) -> str:
        """``workload, N stream(s)``."""
        return f"{self.workload}, {self.streams} stream{'s' if self.streams > 1 else ''}"


CASES = (
    Case("short", 1, 64),
    Case("short", 8, 64),
    Case("short", 16, 64),
    Case("story", 8, 128),
    Case("agent", 1, 300, peer_target=1.5),
    Case("copy", 1, 300, peer_target=1.7),
)
EXTRA_CASES = (Case("edit", 1, 300), Case("edit", 16, 300), Case("random", 1, 128), Case("random", 16, 128))
FLOOR = 0.97
"""Every case: the default config at least this share of speculation off."""


async def run(url: str, case: Case, model: str) -> tuple[list[str], int, float]:
    """``case.streams`` concurrent copies of ``case.workload``; the texts, the
    completion tokens and the wall seconds."""
    prompts = {"copy": COPY_PROMPT, "edit": EDIT_PROMPT, "chat": CHAT_PROMPT}
    n, limit = case.streams, case.max_tokens
    async with httpx.AsyncClient(timeout=1800) as client:
        started = time.perf_counter()
        if case.workload == "agent":
            jobs = [session(client, url, i, limit, model) for i in range(n)]
        elif case.workload == "short":
            jobs = [one(client, url, request(short_prompt(i), limit, model)) for i in range(n)]
        elif case.workload == "story":
            jobs = [one(client, url, request(CHAT_PROMPT, limit, model, temperature=1.0, seed=i)) for i in range(n)]
        elif case.workload == "random":
            jobs = [
                one(client, url, request(random_prompt(i), limit, model, temperature=1.0, seed=i)) for i in range(n)
            ]
        else:
            jobs = [one(client, url, request(prompts[case.workload], limit, model)) for _ in range(n)]
        done = await asyncio.gather(*jobs)
        wall = time.perf_counter() - started
    return [text for text, _ in done], sum(tokens for _, tokens in done), wall


def worker_stats(server) -> dict:
    """The bench model's worker counters (after one heartbeat)."""
    time.sleep(1.5)
    return server.worker(NAME)["stats"]


def main() -> None:
    """Parse the options, start the sides, run every case interleaved,
    print the rates and the ratio lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_write_flag(parser)
    parser.add_argument("--model", type=Path, help="an MLX model directory (default: the float32 default model)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default="", help="workloads to run (default: all of the chosen set)")
    parser.add_argument("--all", action="store_true", help="also the edit and random cases")
    parser.add_argument("--no-peer", action="store_true", help="skip mlx_lm.server")
    args = parser.parse_args()
    cases = [*CASES, *(EXTRA_CASES if args.all else ())]
    if args.cases:
        wanted = set(args.cases.split(","))
        cases = [c for c in cases if c.workload in wanted]
    source = args.model or float32_model()
    rates: dict[tuple[str, str], list[float]] = {}
    texts: dict[tuple[str, str], list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="mlxd-spec-bench-") as name, ExitStack() as stack:
        tmp = Path(name)
        sides = {
            "none": stack.enter_context(
                mlxd(tmp / "none", {"name": NAME, "source": str(source), "speculative": "none"})
            ),
            "default": stack.enter_context(mlxd(tmp / "default", {"name": NAME, "source": str(source)})),
        }
        models = {"none": NAME, "default": NAME}
        if not args.no_peer and any(c.peer_target for c in cases):
            sides["mlx_lm.server"] = stack.enter_context(mlx_lm_server(tmp / "peer", source))
            models["mlx_lm.server"] = PEER_MODEL
        for side, server in sides.items():  # warm-up: the first request's one-time costs
            asyncio.run(run(server.url, Case("chat", 1, 8), models[side]))
        for case in cases:
            order = [s for s in sides if s != "mlx_lm.server" or case.peer_target]
            for r in range(args.rounds):
                for side in order if r % 2 == 0 else reversed(order):
                    done, tokens, wall = asyncio.run(run(sides[side].url, case, models[side]))
                    rates.setdefault((case.label, side), []).append(tokens / wall)
                    texts[(case.label, side)] = done
        stats = worker_stats(sides["default"])
    print(f"speculative decoding, {source.name}, {args.rounds} rounds interleaved (median tok/s)")
    rows, lines = [], []
    for case in cases:
        none, default = median(rates[(case.label, "none")]), median(rates[(case.label, "default")])
        peer = rates.get((case.label, "mlx_lm.server"))
        greedy = case.workload in ("short", "agent", "copy", "edit")
        same = texts[(case.label, "none")] == texts[(case.label, "default")]
        line = f"  {case.label:<18} none {none:7.1f}  default {default:7.1f}"
        line += f"  mlx_lm.server {median(peer):7.1f}" if peer else ""
        print(line + (f"  identical: {same}" if greedy else ""))
        row = {"case": case.label, "none_tok_s": none, "default_tok_s": default}
        row.update({"identical_text": same} if greedy else {})
        row.update({"mlx_lm_server_tok_s": median(peer)} if peer else {})
        rows.append(row)
        lines.append(ratio_line(f"{case.label}: default / speculation off", default, none, FLOOR))
        if peer and case.peer_target:
            lines.append(ratio_line(f"{case.label}: default / mlx_lm.server", default, median(peer), case.peer_target))
    print(f"  drafted {stats['draft_tokens']}, accepted {stats['draft_accepted_tokens']}")
    print(f"  steps: drafted {stats['draft_steps']}, skipped {stats['draft_skipped_steps']}")
    print()
    print("\n".join(lines))
    if args.write:
        write_results(
            "speculative",
            {
                "model": source.name,
                "rounds": args.rounds,
                "cases": rows,
                "drafted_tokens": stats["draft_tokens"],
                "accepted_tokens": stats["draft_accepted_tokens"],
                "draft_steps": stats["draft_steps"],
                "skipped_steps": stats["draft_skipped_steps"],
            },
        )


if __name__ == "__main__":
    main()
