"""Checks every reliability case ends with: the server healthy, a canary
completion served, nothing left running in the worker, and worker memory
near its baseline."""

from __future__ import annotations

import time

import httpx
import psutil

CANARY = [{"role": "user", "content": "canary"}]


def worker_rss(server, model: str) -> int:
    """Resident bytes of ``model``'s worker process."""
    return psutil.Process(server.worker(model)["pid"]).memory_info().rss


def assert_recovered(server, model: str, baseline_rss: int | None = None, slack: int = 96 << 20) -> None:
    """Fail unless the server is back to normal after a misbehaving case.

    ``baseline_rss`` (if given) is the worker's resident memory before the
    case; afterwards it may exceed it by at most ``slack`` bytes.
    """
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
    status = server.wait_ready(model, timeout=120)
    r = httpx.post(
        f"{server.url}/v1/chat/completions",
        # ignore_eos: a sampled end-of-text token must not cut the canary short
        json={"model": model, "messages": CANARY, "max_tokens": 2, "ignore_eos": True},
        headers=server.headers,
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 2
    deadline = time.monotonic() + 120  # a bound, not a wait: a busy machine only makes this slower
    while True:
        stats = server.worker(model)["stats"]
        if stats["running"] == 0 and stats["waiting"] == 0:
            break
        assert time.monotonic() < deadline, f"still running: {stats}"
        time.sleep(0.3)
    if baseline_rss is not None and status["pid"]:
        grown = worker_rss(server, model) - baseline_rss
        assert grown < slack, f"worker memory grew by {grown >> 20} MiB"
