"""Load-generation helpers shared by the bench scripts.

An async streaming client that records time to first token and counts
completion tokens from the server's usage chunk, and a context manager that
runs an mlxd gateway for a given model config on a free loopback port.
Nothing here asserts: scripts print measured ratios.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import Server, start_server  # noqa: E402


@dataclass
class Result:
    """One streamed request: seconds to the first content byte, total
    seconds, completion tokens (from usage) and cached prompt tokens."""

    ttft: float
    total: float
    tokens: int
    cached: int


async def stream_chat(client: httpx.AsyncClient, url: str, body: dict) -> Result:
    """Send one streaming chat request and measure it."""
    body = body | {"stream": True, "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    ttft = None
    usage: dict = {}
    async with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            frame = json.loads(line[6:])
            if frame.get("usage"):
                usage = frame["usage"]
            elif ttft is None and frame.get("choices") and frame["choices"][0]["delta"].get("content"):
                ttft = time.perf_counter() - started
    total = time.perf_counter() - started
    details = usage.get("prompt_tokens_details") or {}
    return Result(ttft or total, total, usage.get("completion_tokens", 0), details.get("cached_tokens", 0))


async def concurrent(url: str, bodies: list[dict]) -> tuple[list[Result], float]:
    """Run every body at once; return the results and the wall time."""
    limits = httpx.Limits(max_connections=len(bodies) + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        started = time.perf_counter()
        results = await asyncio.gather(*(stream_chat(client, url, b) for b in bodies))
        return list(results), time.perf_counter() - started


def aggregate(results: list[Result], wall: float) -> float:
    """Completion tokens per second over the whole run."""
    return sum(r.tokens for r in results) / wall


def median(values: list[float]) -> float:
    """The median (0 for no values)."""
    return statistics.median(values) if values else 0.0


@contextlib.contextmanager
def mlxd(tmp: Path, model: dict) -> Iterator[Server]:
    """Run an mlxd gateway serving ``model`` (a ``[[models]]`` table) without
    API keys; stop it on exit."""
    tmp.mkdir(parents=True, exist_ok=True)
    server = start_server(tmp, [model], api_key=None)
    try:
        yield server
    finally:
        server.stop()
