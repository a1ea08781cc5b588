"""Agent-session benchmark: time to first token per turn of a growing
conversation, for mlxd and mlx_lm.server on the same model, and the same
session resumed after an mlxd restart (from the prefix cache's disk tier).

The session: a system prompt, then ``--turns`` turns, each a user message
carrying a tool result of ``--tool-words`` words (the context grows to
about 4k tokens over 10 turns) answered by a fixed assistant line (so
every server sees the very same prompts). Each turn is one streamed greedy
request; TTFT is measured by the client.

Prints, per turn, TTFT for each contender and mlxd's cached tokens; then:

- ``resumed``: mlxd is stopped and started again on the same disk tier and
  the last turn's prompt is sent: its TTFT against the same prompt sent
  cold to a fresh mlxd without a disk tier (target: resumed <= 0.3x cold);
- with ``--kv-bits``: the session again with quantized prefix-cache
  entries, its TTFTs and the prefix cache's bytes against full precision.

With ``--write`` the numbers also go to ``bench/results/agent_session.json``.

Usage: ``.venv/bin/python bench/agent_session.py [--model real|tiny]
[--turns 10] [--contenders mlxd,mlx_lm] [--kv-bits 8]``. On a shared
machine a quick smoke run is ``--model tiny --turns 2 --contenders mlxd``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path

import httpx
from harness import Result, mlx_lm_server, mlxd, stream_chat
from models import float32_model, tiny_model
from record import add_write_flag
from record import write as write_results

WORDS = "read write grep edit test build file line error pass fail path module function class value".split()
NAME = "bench"
PEER_MODEL = "default_model"  # mlx_lm.server's name for its --model


def session(turns: int, tool_words: int, seed: int = 0) -> list[list[dict]]:
    """The message list of every turn (each extends the previous one)."""
    rng = random.Random(seed)
    system = "You are a coding agent. Use the tools. " + " ".join(rng.choice(WORDS) for _ in range(250))
    messages: list[dict] = [{"role": "system", "content": system}]
    history = []
    for turn in range(turns):
        result = " ".join(rng.choice(WORDS) for _ in range(tool_words))
        messages.append({"role": "user", "content": f"Tool result {turn}:\n{result}\nWhat next?"})
        history.append(list(messages))
        messages.append({"role": "assistant", "content": f"Step {turn} done; calling the next tool."})
    return history


def body(messages: list[dict], model: str = NAME) -> dict:
    """A greedy streamed chat request of a few tokens."""
    return {"model": model, "messages": messages, "max_tokens": 8, "temperature": 0}


async def run_session(url: str, turns: list[list[dict]], model: str = NAME) -> list[Result]:
    """Send every turn in order; return their measurements."""
    async with httpx.AsyncClient(timeout=600) as client:
        return [await stream_chat(client, f"{url}/v1/chat/completions", body(m, model)) for m in turns]


def mlxd_model(source: Path, disk: Path | None = None, kv_bits: int = 0) -> dict:
    """The ``[[models]]`` table of the mlxd contender."""
    model = {"name": NAME, "source": str(source), "max_batch_size": 8, "prefix_cache_bytes": 2 << 30}
    if disk is not None:
        model |= {"disk_cache_bytes": "4GiB", "disk_cache_dir": str(disk)}
    if kv_bits:
        model |= {"kv_bits": kv_bits}
    return model


def wait_for_disk(server, timeout: float = 60.0) -> None:
    """Wait until the worker has written what it holds to disk (its writer
    runs when the engine is idle)."""
    deadline = time.monotonic() + timeout
    seen = -1
    while time.monotonic() < deadline:
        entries = server.worker(NAME)["stats"].get("disk_cache_entries", 0)
        if entries and entries == seen:
            return
        seen = entries
        time.sleep(1.0)


def print_turns(columns: dict[str, list[Result]]) -> None:
    """One row per turn: prompt tokens, each contender's TTFT, mlxd's cached tokens."""
    names = list(columns)
    print("turn  prompt_tokens  " + "  ".join(f"{n + ' TTFT ms':>18}" for n in names) + "  mlxd cached")
    mlxd_rows = columns.get("mlxd", [])
    for i in range(len(columns[names[0]])):
        prompt = max(columns[n][i].prompt_tokens for n in names)
        ttfts = "  ".join(f"{columns[n][i].ttft * 1000:>18.0f}" for n in names)
        cached = mlxd_rows[i].cached if mlxd_rows else 0
        print(f"{i + 1:>4}  {prompt:>13}  {ttfts}  {cached:>11}")


def turn_rows(columns: dict[str, list[Result]]) -> list[dict]:
    """One record per turn for ``bench/results/agent_session.json``: prompt
    tokens, each contender's TTFT (seconds) and mlxd's cached tokens."""
    names = list(columns)
    mlxd_rows = columns.get("mlxd", [])
    return (
        [
            {
                "turn": i + 1,
                "prompt_tokens": max(columns[n][i].prompt_tokens for n in names),
                "ttft_s": {n: columns[n][i].ttft for n in names},
                "mlxd_cached_tokens": mlxd_rows[i].cached if mlxd_rows else 0,
            }
            for i in range(len(columns[names[0]]))
        ]
        if names
        else []
    )


def main() -> None:
    """Run the session on each contender, then the resumed and ``--kv-bits``
    runs; print them (and with ``--write`` write ``bench/results/agent_session.json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_write_flag(parser)
    parser.add_argument("--model", choices=("real", "tiny"), default="real")
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--tool-words", type=int, default=300)
    parser.add_argument("--contenders", default="mlxd,mlx_lm")
    parser.add_argument("--kv-bits", type=int, choices=(0, 4, 8), default=0)
    args = parser.parse_args()
    source = float32_model() if args.model == "real" else tiny_model()
    turns = session(args.turns, args.tool_words)
    wanted = args.contenders.split(",")
    columns: dict[str, list[Result]] = {}
    with tempfile.TemporaryDirectory(prefix="mlxd-agent-") as tmp_name:
        tmp = Path(tmp_name)
        disk = tmp / "disk"
        if "mlxd" in wanted:
            with mlxd(tmp / "mlxd", mlxd_model(source, disk)) as server:
                columns["mlxd"] = asyncio.run(run_session(server.url, turns))
                wait_for_disk(server)
        if "mlx_lm" in wanted:
            with mlx_lm_server(tmp / "mlx_lm", source) as peer:
                columns["mlx_lm.server"] = asyncio.run(run_session(peer.url, turns, model=PEER_MODEL))
        print(f"agent session on {args.model} ({source.name}), {args.turns} turns")
        print_turns(columns)
        data: dict = {"model": f"{args.model} ({source.name})", "turns": turn_rows(columns)}
        if "mlx_lm.server" in columns and "mlxd" in columns:
            later = range(1, len(turns))
            ratios = [columns["mlxd"][i].ttft / columns["mlx_lm.server"][i].ttft for i in later]
            if ratios:
                print(
                    f"mlxd / mlx_lm.server TTFT, turns 2..{len(turns)}: median {sorted(ratios)[len(ratios) // 2]:.2f}x"
                )
        if "mlxd" in wanted:
            last = [turns[-1]]
            with mlxd(tmp / "mlxd-resumed", mlxd_model(source, disk)) as server:
                (resumed,) = asyncio.run(run_session(server.url, last))
            with mlxd(tmp / "mlxd-cold", mlxd_model(source)) as server:
                (cold,) = asyncio.run(run_session(server.url, last))
            data["resumed"] = {"ttft_s": resumed.ttft, "cached_tokens": resumed.cached, "cold_ttft_s": cold.ttft}
            print(
                f"resumed after restart: TTFT {resumed.ttft * 1000:.0f} ms ({resumed.cached} cached tokens) "
                f"vs cold {cold.ttft * 1000:.0f} ms: {resumed.ttft / cold.ttft:.2f}x (target <= 0.30x)"
            )
        if args.kv_bits and "mlxd" in wanted:
            rows = {}
            for label, bits in (("full", 0), (f"kv_bits={args.kv_bits}", args.kv_bits)):
                with mlxd(tmp / f"mlxd-{label}", mlxd_model(source, kv_bits=bits)) as server:
                    results = asyncio.run(run_session(server.url, turns))
                    time.sleep(1.5)  # one heartbeat
                    rows[label] = (results, server.worker(NAME)["stats"]["cache_bytes"])
            for label, (results, nbytes) in rows.items():
                ttfts = ", ".join(f"{r.ttft * 1000:.0f}" for r in results)
                print(f"{label:>10}: prefix cache {nbytes / 1e6:.1f} MB; TTFT ms per turn: {ttfts}")
            data["kv_bits"] = {
                label: {"cache_bytes": nbytes, "ttft_s": [r.ttft for r in results]}
                for label, (results, nbytes) in rows.items()
            }
        if args.write:
            write_results("agent_session", data)


if __name__ == "__main__":
    main()
