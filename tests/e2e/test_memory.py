"""Memory the way MLX counts it, against real worker processes (tiny model):
``Loaded`` and heartbeats carry MLX's active, cache and peak bytes, /metrics
exports them per model, the budget evicts on the reported peak, the worker
gets an MLX memory limit from the budget, and MLX's cache is cleared once
the engine has been idle."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import os
import signal
import threading
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gateway.workers.process import run_incarnation
from shared.config import ModelConfig, ServerConfig
from shared.protocol import Heartbeat, Loaded, Ready, Shutdown
from shared.sockets import make_socket_dir, remove_socket_dir
from tests.conftest import API_KEY, start_server, write_config

MIB = 1 << 20


def scrape(srv) -> dict[tuple[str, str], float]:
    """Every per-model sample of /metrics as {(name, model): value}."""
    text = httpx.get(f"{srv.url}/metrics", headers=srv.headers, timeout=10).text
    return {
        (s.name, s.labels.get("model", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def in_flight(srv) -> float:
    """Requests the gateway admitted and has not answered yet (all keys)."""
    return sum(v for (name, _), v in scrape(srv).items() if name == "mlxd:api_key_requests_in_flight")


def wait_for(predicate, timeout=30.0, interval=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError("condition not met")


def test_loaded_and_heartbeats_carry_mlx_memory(tiny_model_dir):
    """A real worker started the way the gateway starts it: ``Loaded``
    reports MLX's counters and the memory limit it was given; heartbeats
    after Ready report them too."""
    limit = 3 << 30
    messages: list[object] = []

    async def run() -> str:
        socket_dir = make_socket_dir()
        incarnation = []

        def on_message(message):
            messages.append(message)
            heartbeats = [m for m in messages if isinstance(m, Heartbeat) and m.stats.peak_memory_bytes]
            if any(isinstance(m, Ready) for m in messages) and heartbeats:
                incarnation[0].send(Shutdown())

        try:
            return await asyncio.wait_for(
                run_incarnation(
                    ModelConfig(name="mem", source=str(tiny_model_dir)),
                    ServerConfig(),
                    socket_dir,
                    1,
                    on_start=incarnation.append,
                    on_message=on_message,
                    silence_limit=lambda: 60.0,
                    memory_limit=limit,
                    cache_limit=64 * MIB,
                ),
                120,
            )
        finally:
            remove_socket_dir(socket_dir)

    asyncio.run(run())
    (loaded,) = [m for m in messages if isinstance(m, Loaded)]
    assert loaded.active_memory_bytes > 1 * MIB  # the weights
    assert loaded.peak_memory_bytes >= loaded.active_memory_bytes
    assert loaded.cache_memory_bytes >= 0
    assert loaded.memory_limit_bytes == limit
    assert loaded.working_set_bytes == 0  # CPU backend: no Metal working set
    beat = [m for m in messages if isinstance(m, Heartbeat) and m.stats.peak_memory_bytes][-1]
    assert beat.stats.active_memory_bytes > 1 * MIB
    assert beat.stats.peak_memory_bytes >= loaded.peak_memory_bytes


def test_metrics_show_mlx_memory_and_idle_clears_the_cache(tiny_model_dir, tmp_path):
    srv = start_server(tmp_path, [{"name": "m", "source": str(tiny_model_dir)}])
    try:
        seen: dict[str, float] = {}
        done = threading.Event()

        def stream():
            body = {
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 1200,
                "ignore_eos": True,
                "stream": True,
            }
            url = f"{srv.url}/v1/chat/completions"
            with httpx.stream("POST", url, json=body, headers=srv.headers, timeout=120) as response:
                lines = list(response.iter_lines())
            if "data: [DONE]" in lines:
                done.set()

        def busy_numbers():
            s = scrape(srv)
            seen.update({k: s.get((f"mlxd:mlx_{k}_memory_bytes", "m"), 0.0) for k in ("active", "cache", "peak")})
            return all(v > 0 for v in seen.values())

        worker = threading.Thread(target=stream, daemon=True)
        worker.start()
        wait_for(busy_numbers, timeout=60)  # during the request or right after it
        assert seen["peak"] >= seen["active"] > 1 * MIB
        worker.join(120)
        assert not worker.is_alive() and done.is_set()
        # idle for IDLE_CLEAR_SECONDS: MLX's cache is given back, weights stay
        wait_for(lambda: scrape(srv).get(("mlxd:mlx_cache_memory_bytes", "m")) == 0, timeout=60)
        after = scrape(srv)
        assert srv.worker("m")["incarnation"] == 1, srv.log_path.read_text()
        assert after[("mlxd:mlx_active_memory_bytes", "m")] > 1 * MIB
        assert after[("mlxd:mlx_peak_memory_bytes", "m")] >= seen["peak"]
        assert after[("mlxd:model_memory_estimate_bytes", "m")] > 0
        assert ("mlxd:gpu_working_set_bytes", "m") not in after  # not Metal
    finally:
        srv.stop()


def test_eviction_counts_the_reported_peak(tiny_model_dir, tmp_path):
    """A budget that fits model ``a`` by its RSS at ready (what mlxd used to
    count) and by its file size, but not by the peak MLX reported after a
    burst of long prompts, evicts ``a`` when ``b`` needs room."""
    models = [
        {"name": "a", "source": str(tiny_model_dir), "prefill_step_size": 2048, "preload": True},
        {"name": "b", "source": str(tiny_model_dir), "preload": False, "ttl": 0},
    ]
    srv = start_server(tmp_path, models)
    port = int(srv.url.rsplit(":", 1)[1])

    def set_budget(budget: int) -> None:
        write_config(tmp_path / "mlxd.toml", port, models, [API_KEY], memory_budget=budget)
        srv.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: srv.log_path.read_text().count("reloaded ") >= reloads + 1, timeout=60)

    def ask(model: str, content: str = "hi") -> None:
        body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 2}
        r = httpx.post(f"{srv.url}/v1/chat/completions", json=body, headers=srv.headers, timeout=120)
        assert r.status_code == 200, r.text

    try:
        reloads = srv.log_path.read_text().count("reloaded ")
        rss_at_ready = srv.worker("a")["memory_bytes"]
        metrics = scrape(srv)
        est_a, est_b = (
            metrics[("mlxd:model_memory_estimate_bytes", "a")],
            metrics[("mlxd:model_memory_estimate_bytes", "b")],
        )
        budget = int(max(est_a, rss_at_ready) + est_b + 8 * MIB)
        set_budget(budget)
        ask("b")  # fits next to a: nothing is evicted
        assert srv.worker("a")["state"] == "ready"
        wait_for(lambda: srv.worker("b")["state"] == "unloaded", timeout=60)  # ttl 0

        words = " ".join(f"w{i}" for i in range(380))  # ~1500 tokens each, prefilled together
        # the peak is the prompts' prefill batch (their attention scores; one at a time peaks at a fifth):
        # the worker is stopped until the gateway has sent all eight, so they reach it together however
        # quickly it would have prefilled the first ones alone
        worker = srv.worker("a")["pid"]
        os.kill(worker, signal.SIGSTOP)
        try:
            with cf.ThreadPoolExecutor(8) as pool:
                answers = [pool.submit(ask, "a", f"{i} {words}") for i in range(8)]
                wait_for(lambda: in_flight(srv) >= 8, timeout=60)
                os.kill(worker, signal.SIGCONT)
                for answer in answers:
                    answer.result()
        finally:
            os.kill(worker, signal.SIGCONT)
        peak = wait_for(
            lambda: srv.worker("a")["peak_memory_bytes"] + est_b > budget and srv.worker("a")["peak_memory_bytes"]
        )
        assert rss_at_ready + est_b <= budget < peak + est_b  # fits by RSS, not by the reported peak
        ask("b")
        assert srv.worker("a")["state"] == "unloaded"  # evicted for b
        assert "evicting a to make room for b" in srv.log_path.read_text()
    finally:
        srv.stop()


def test_budget_sets_the_worker_memory_limit(tiny_model_dir, tmp_path):
    srv = start_server(tmp_path, [{"name": "m", "source": str(tiny_model_dir)}], memory_budget="512MiB")
    try:
        status = srv.worker("m")
        assert status["memory_limit_bytes"] == 512 * MIB  # the whole budget: nothing else is resident
        assert status["working_set_bytes"] == 0
    finally:
        srv.stop()
