"""``make soak``: mixed traffic with disconnects against a real gateway and
worker for a long time (30 minutes by default), then a table of the worker's
memory over time. Not part of ``make test``.

Usage: ``.venv/bin/python tests/reliability/soak.py [--minutes M] [--model SOURCE]``
(default model: a tiny random-weight model, so many requests fit).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.conftest import API_KEY, start_server  # noqa: E402
from tests.tiny_model import build_tiny_model  # noqa: E402

MODEL = "soak"


def bodies(rng: random.Random) -> tuple[str, dict, float | None]:
    """One random request: path, JSON body, and after how many seconds the
    client walks away (None: it reads to the end)."""
    kind = rng.choice(["chat", "chat_stream", "completion", "messages", "bad", "json"])
    leave = rng.choice([None, None, None, rng.uniform(0.01, 1.0)])
    words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(rng.randint(1, 400)))
    messages = [{"role": "user", "content": words}]
    n = rng.randint(1, 200)
    if kind == "chat":
        return "/v1/chat/completions", {"model": MODEL, "messages": messages, "max_tokens": n}, leave
    if kind == "chat_stream":
        return "/v1/chat/completions", {"model": MODEL, "messages": messages, "max_tokens": n, "stream": True}, leave
    if kind == "completion":
        return "/v1/completions", {"model": MODEL, "prompt": words, "max_tokens": n, "seed": rng.randint(0, 9)}, leave
    if kind == "messages":
        return (
            "/v1/messages",
            {"model": MODEL, "messages": messages, "max_tokens": n, "stream": rng.random() < 0.5},
            leave,
        )
    if kind == "json":
        fmt = {
            "type": "json_schema",
            "json_schema": {
                "name": "x",
                "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            },
        }
        return (
            "/v1/chat/completions",
            {"model": MODEL, "messages": messages, "max_tokens": 30, "response_format": fmt},
            leave,
        )
    return "/v1/chat/completions", {"model": MODEL, "messages": [], "max_tokens": -1}, None


async def client_loop(url: str, rng: random.Random, stop_at: float, counts: dict[str, int]) -> None:
    """Send random requests until ``stop_at``; count outcomes."""
    headers = {"Authorization": f"Bearer {API_KEY}"}
    async with httpx.AsyncClient(timeout=120, headers=headers) as http:
        while time.monotonic() < stop_at:
            path, body, leave = bodies(rng)
            try:
                async with asyncio.timeout(leave) if leave else _nothing():
                    async with http.stream("POST", url + path, json=body) as r:
                        async for _ in r.aiter_bytes():
                            pass
                    counts[str(r.status_code)] = counts.get(str(r.status_code), 0) + 1
            except TimeoutError:
                counts["left"] = counts.get("left", 0) + 1
            except httpx.HTTPError as exc:
                counts[type(exc).__name__] = counts.get(type(exc).__name__, 0) + 1


class _nothing:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


async def soak(url: str, pid: int, minutes: float, clients: int) -> list[tuple[float, int, dict[str, int]]]:
    """Run the traffic; sample the worker's memory every ``minutes/30``."""
    stop_at = time.monotonic() + minutes * 60
    counts: dict[str, int] = {}
    tasks = [asyncio.create_task(client_loop(url, random.Random(i), stop_at, counts)) for i in range(clients)]
    samples = []
    started = time.monotonic()
    interval = max(5.0, minutes * 60 / 30)
    proc = psutil.Process(pid)
    while time.monotonic() < stop_at:
        samples.append((time.monotonic() - started, proc.memory_info().rss, dict(counts)))
        await asyncio.sleep(interval)
    await asyncio.gather(*tasks)
    samples.append((time.monotonic() - started, proc.memory_info().rss, dict(counts)))
    return samples


def main() -> int:
    """Run the soak and print the memory table; exit 1 if memory grew."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--model", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = args.model or str(build_tiny_model(Path(tmp) / "tiny"))
        srv = start_server(
            Path(tmp),
            [{"name": MODEL, "source": source, "max_batch_size": 16, "max_queued": 16, "prefix_cache_bytes": 32 << 20}],
        )
        try:
            pid = srv.worker(MODEL)["pid"]
            samples = asyncio.run(soak(srv.url, pid, args.minutes, args.clients))
            assert srv.worker(MODEL)["pid"] == pid, "the worker restarted during the soak"
        finally:
            srv.stop()
    print(f"{'minute':>7} {'worker RSS MiB':>15}  outcomes so far")
    for t, rss, counts in samples:
        print(f"{t / 60:7.1f} {rss / 2**20:15.1f}  {counts}")
    warm = samples[min(len(samples) - 1, max(1, len(samples) // 5))][1]
    growth = samples[-1][1] - warm
    print(f"growth after warm-up: {growth / 2**20:.1f} MiB")
    return 0 if growth < 64 * 2**20 else 1


if __name__ == "__main__":
    sys.exit(main())
