"""Tests of gateway.metrics.registry, gateway.metrics.request_timer and gateway.metrics.snapshot: exact exposition values from explicit timings and snapshots."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics.registry import FINISHED_REASONS, Metrics
from gateway.metrics.snapshot import MODEL_STATES, ModelSnapshot
from shared.protocol import RequestOutput, WorkerStats

M = "m1"


class Pool:
    """A fake pool: ``snaps`` is what the next scrape sees; counts calls."""

    def __init__(self, *snaps: ModelSnapshot) -> None:
        self.snaps = list(snaps)
        self.calls = 0

    def __call__(self) -> list[ModelSnapshot]:
        self.calls += 1
        return list(self.snaps)


def snap(
    name: str = M,
    state: str = "ready",
    pid: int | None = None,
    restarts: int = 0,
    load_seconds: float | None = None,
    stats: WorkerStats | None = None,
) -> ModelSnapshot:
    """A ModelSnapshot with quiet defaults."""
    return ModelSnapshot(name=name, state=state, pid=pid, restarts=restarts, load_seconds=load_seconds, stats=stats)


def scrape(metrics: Metrics) -> tuple[list, dict]:
    """Render and parse: (families, {(sample name, sorted label items): value})."""
    body, ctype = metrics.render()
    assert ctype.startswith("text/plain")
    families = list(text_string_to_metric_families(body.decode()))
    values = {}
    for fam in families:
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in values, key
            values[key] = s.value
    return families, values


def v(values: dict, name: str, **labels: str) -> float | None:
    """The value of one sample, None when absent."""
    return values.get((name, tuple(sorted(labels.items()))))


def hist(values: dict, name: str, model: str = M) -> tuple[float, float]:
    """(count, sum) of histogram ``name`` for ``model``."""
    return v(values, name + "_count", model=model), v(values, name + "_sum", model=model)


def bucket(values: dict, name: str, le: str, model: str = M) -> float:
    """Cumulative count of histogram ``name`` at upper bound ``le``."""
    return v(values, name + "_bucket", model=model, le=le)


def test_names_prefixed_and_every_sample_has_model_label():
    me = psutil.Process(os.getpid())
    pool = Pool(
        snap(M, pid=me.pid, restarts=1, load_seconds=2.0, stats=WorkerStats(running=1, cache_queries=3)),
        snap("m2", state="failed"),
    )
    metrics = Metrics(pool)
    t = metrics.request_started(M, now=0.0)
    t.queued(0.01)
    t.output(tokens=1, now=0.1)
    t.output(tokens=1, now=0.2)
    t.finished(reason="stop", prompt_tokens=5, cached_tokens=2, completion_tokens=2, now=0.3)
    families, values = scrape(metrics)
    names = {f.name for f in families}
    assert names and all(n.startswith("mlxd:") for n in names), names
    for fam in families:
        for s in fam.samples:
            assert s.name.startswith("mlxd:"), s.name
            assert "model" in s.labels, (s.name, s.labels)
    expected = {
        "mlxd:num_requests_running",
        "mlxd:num_requests_waiting",
        "mlxd:request_success",
        "mlxd:prompt_tokens",
        "mlxd:generation_tokens",
        "mlxd:prompt_tokens_cached",
        "mlxd:time_to_first_token_seconds",
        "mlxd:inter_token_latency_seconds",
        "mlxd:e2e_request_latency_seconds",
        "mlxd:request_queue_time_seconds",
        "mlxd:prefix_cache_queries",
        "mlxd:prefix_cache_hits",
        "mlxd:prefix_cache_bytes",
        "mlxd:prefix_cache_budget_bytes",
        "mlxd:worker_restarts",
        "mlxd:worker_memory_bytes",
        "mlxd:model_load_time_seconds",
        "mlxd:model_state",
    }
    assert expected <= names, expected - names
    # counters are exposed with the _total suffix vLLM dashboards query
    for counter in (
        "request_success",
        "prompt_tokens",
        "generation_tokens",
        "prompt_tokens_cached",
        "prefix_cache_queries",
        "prefix_cache_hits",
        "worker_restarts",
    ):
        assert any(name == f"mlxd:{counter}_total" for name, _ in values), counter


def test_request_success_counts_every_reason_and_starts_at_zero():
    metrics = Metrics(Pool(snap(M), snap("m2")))
    _, values = scrape(metrics)
    for model in (M, "m2"):
        for reason in FINISHED_REASONS:
            assert v(values, "mlxd:request_success_total", model=model, finished_reason=reason) == 0
        assert hist(values, "mlxd:e2e_request_latency_seconds", model) == (0, 0)

    plan = {"stop": 3, "length": 2, "tool_calls": 1, "abort": 4, "error": 1}
    for reason, n in plan.items():
        for _ in range(n):
            metrics.request_started(M, now=0.0).finished(
                reason=reason, prompt_tokens=0, cached_tokens=0, completion_tokens=0, now=1.0
            )
    _, values = scrape(metrics)
    for reason, n in plan.items():
        assert v(values, "mlxd:request_success_total", model=M, finished_reason=reason) == n
        assert v(values, "mlxd:request_success_total", model="m2", finished_reason=reason) == 0
    assert hist(values, "mlxd:e2e_request_latency_seconds") == (11, 11.0)


def test_token_counters():
    metrics = Metrics(Pool())
    a = metrics.request_started(M, now=0.0)
    a.output(tokens=3, now=1.0)
    a.output(tokens=0, now=1.5)
    a.output(tokens=2, now=2.0)
    _, values = scrape(metrics)
    # generation tokens are counted while streaming, before the request ends
    assert v(values, "mlxd:generation_tokens_total", model=M) == 5
    assert v(values, "mlxd:prompt_tokens_total", model=M) == 0
    a.finished(reason="stop", prompt_tokens=100, cached_tokens=64, completion_tokens=5, now=3.0)

    b = metrics.request_started(M, now=0.0)  # never streamed: finished() counts everything
    b.finished(reason="length", prompt_tokens=10, cached_tokens=0, completion_tokens=7, now=1.0)
    c = metrics.request_started(M, now=0.0)  # streamed fewer than it reports: topped up
    c.output(tokens=2, now=0.5)
    c.finished(reason="stop", prompt_tokens=1, cached_tokens=1, completion_tokens=4, now=1.0)
    _, values = scrape(metrics)
    assert v(values, "mlxd:prompt_tokens_total", model=M) == 111
    assert v(values, "mlxd:prompt_tokens_cached_total", model=M) == 65
    assert v(values, "mlxd:generation_tokens_total", model=M) == 5 + 7 + 4


def test_ttft_and_inter_token_latency():
    metrics = Metrics(Pool())
    t = metrics.request_started(M, now=100.0)
    t.output(tokens=0, now=100.5)  # no token yet: no TTFT
    _, values = scrape(metrics)
    assert hist(values, "mlxd:time_to_first_token_seconds") == (0, 0)
    t.output(tokens=1, now=101.0)  # TTFT 1.0, starts the ITL clock
    t.output(tokens=1, now=101.25)  # ITL 0.25
    t.output(tokens=0, now=101.5)  # no token: neither observes nor moves the clock
    t.output(tokens=2, now=101.75)  # gap 0.5 over 2 tokens: 0.25 observed twice
    t.output(tokens=4, now=102.75)  # gap 1.0 over 4 tokens: 0.25 observed 4 times
    _, values = scrape(metrics)
    assert hist(values, "mlxd:time_to_first_token_seconds") == (1, 1.0)
    assert bucket(values, "mlxd:time_to_first_token_seconds", "0.75") == 0
    assert bucket(values, "mlxd:time_to_first_token_seconds", "1.0") == 1
    assert hist(values, "mlxd:inter_token_latency_seconds") == (7, 1.75)
    assert bucket(values, "mlxd:inter_token_latency_seconds", "0.2") == 0
    assert bucket(values, "mlxd:inter_token_latency_seconds", "0.3") == 7
    assert bucket(values, "mlxd:inter_token_latency_seconds", "+Inf") == 7
    t.finished(reason="stop", prompt_tokens=1, cached_tokens=0, completion_tokens=8, now=103.0)
    _, values = scrape(metrics)
    assert hist(values, "mlxd:e2e_request_latency_seconds") == (1, 3.0)
    assert bucket(values, "mlxd:e2e_request_latency_seconds", "2.5") == 0
    assert bucket(values, "mlxd:e2e_request_latency_seconds", "5.0") == 1


def test_inter_token_latency_is_per_choice():
    metrics = Metrics(Pool())
    t = metrics.request_started(M, now=0.0)
    t.output(tokens=1, now=1.0, index=0)  # TTFT (request-wide, once)
    t.output(tokens=1, now=1.0, index=1)  # first token of choice 1: starts its clock only
    t.output(tokens=1, now=1.5, index=0)  # ITL 0.5
    t.output(tokens=1, now=1.5, index=1)  # ITL 0.5, not 0.0
    _, values = scrape(metrics)
    assert hist(values, "mlxd:time_to_first_token_seconds") == (1, 1.0)
    assert hist(values, "mlxd:inter_token_latency_seconds") == (2, 1.0)


def test_queue_time_observed_once():
    metrics = Metrics(Pool())
    t = metrics.request_started(M, now=0.0)
    t.queued(0.5)
    t.queued(9.0)  # ignored: one queue time per request
    u = metrics.request_started(M, now=0.0)
    u.queued(0.004)
    _, values = scrape(metrics)
    assert hist(values, "mlxd:request_queue_time_seconds") == (2, 0.504)
    assert bucket(values, "mlxd:request_queue_time_seconds", "0.005") == 1
    assert bucket(values, "mlxd:request_queue_time_seconds", "0.5") == 2


def test_finished_is_idempotent_and_closes_the_timer():
    metrics = Metrics(Pool())
    t = metrics.request_started(M, now=0.0)
    t.output(tokens=1, now=1.0)
    t.finished(reason="stop", prompt_tokens=10, cached_tokens=4, completion_tokens=1, now=2.0)
    assert t.done
    t.finished(reason="error", prompt_tokens=10, cached_tokens=4, completion_tokens=50, now=9.0)
    t.output(tokens=5, now=3.0)
    t.queued(1.0)
    _, values = scrape(metrics)
    assert v(values, "mlxd:request_success_total", model=M, finished_reason="stop") == 1
    assert v(values, "mlxd:request_success_total", model=M, finished_reason="error") == 0
    assert v(values, "mlxd:prompt_tokens_total", model=M) == 10
    assert v(values, "mlxd:prompt_tokens_cached_total", model=M) == 4
    assert v(values, "mlxd:generation_tokens_total", model=M) == 1
    assert hist(values, "mlxd:e2e_request_latency_seconds") == (1, 2.0)
    assert hist(values, "mlxd:inter_token_latency_seconds") == (0, 0)
    assert hist(values, "mlxd:request_queue_time_seconds") == (0, 0)


def test_heartbeat_series_follow_the_latest_snapshot_across_a_restart():
    pool = Pool(
        snap(
            M,
            restarts=0,
            load_seconds=3.5,
            stats=WorkerStats(
                running=3, waiting=2, cache_queries=10, cache_hits=7, cache_bytes=4096, cache_budget_bytes=1 << 30
            ),
        )
    )
    metrics = Metrics(pool)
    _, values = scrape(metrics)
    assert v(values, "mlxd:num_requests_running", model=M) == 3
    assert v(values, "mlxd:num_requests_waiting", model=M) == 2
    assert v(values, "mlxd:prefix_cache_queries_total", model=M) == 10
    assert v(values, "mlxd:prefix_cache_hits_total", model=M) == 7
    assert v(values, "mlxd:prefix_cache_bytes", model=M) == 4096
    assert v(values, "mlxd:prefix_cache_budget_bytes", model=M) == 1 << 30
    assert v(values, "mlxd:worker_restarts_total", model=M) == 0
    assert v(values, "mlxd:model_load_time_seconds", model=M) == 3.5

    # same heartbeat scraped again: not accumulated
    _, values = scrape(metrics)
    assert v(values, "mlxd:prefix_cache_queries_total", model=M) == 10
    assert v(values, "mlxd:prefix_cache_hits_total", model=M) == 7

    pool.snaps = [snap(M, state="restarting", restarts=1, load_seconds=3.5, stats=None)]
    _, values = scrape(metrics)
    for name in (
        "mlxd:num_requests_running",
        "mlxd:num_requests_waiting",
        "mlxd:prefix_cache_queries_total",
        "mlxd:prefix_cache_hits_total",
        "mlxd:prefix_cache_bytes",
        "mlxd:prefix_cache_budget_bytes",
    ):
        assert v(values, name, model=M) is None, name
    assert v(values, "mlxd:worker_restarts_total", model=M) == 1

    # the new incarnation reports totals from zero: exposed values follow
    pool.snaps = [
        snap(
            M,
            restarts=1,
            load_seconds=1.25,
            stats=WorkerStats(
                running=0, waiting=0, cache_queries=2, cache_hits=1, cache_bytes=0, cache_budget_bytes=1 << 30
            ),
        )
    ]
    _, values = scrape(metrics)
    assert v(values, "mlxd:prefix_cache_queries_total", model=M) == 2
    assert v(values, "mlxd:prefix_cache_hits_total", model=M) == 1
    assert v(values, "mlxd:num_requests_running", model=M) == 0
    assert v(values, "mlxd:worker_restarts_total", model=M) == 1
    assert v(values, "mlxd:model_load_time_seconds", model=M) == 1.25


KV_SERIES = {
    "mlxd:kv_cache_bytes": ("kv_bytes", 3 << 20),
    "mlxd:kv_cache_tokens": ("kv_tokens", 900),
    "mlxd:kv_budget_bytes": ("kv_budget_bytes", 8 << 20),
    "mlxd:num_requests_waiting_for_memory": ("kv_waiting", 2),
    "mlxd:kv_preemptions_total": ("kv_preemptions", 5),
    "mlxd:kv_waited_requests_total": ("kv_waited", 7),
}
"""The KV budget's series: sample name -> (heartbeat field, a value)."""


def test_kv_budget_series_follow_the_heartbeat():
    """Each KV-budget field of the latest heartbeat is its series' value
    (gauges and ``_total`` counters), absent without a heartbeat and 0 for
    a worker without a budget."""
    stats = WorkerStats(running=1, **{field: value for field, value in KV_SERIES.values()})
    pool = Pool(snap(M, stats=stats), snap("m2", stats=WorkerStats()), snap("m3", state="unloaded"))
    families, values = scrape(Metrics(pool))
    kinds = {f.name: f.type for f in families}
    for name, (_, value) in KV_SERIES.items():
        assert v(values, name, model=M) == value, name
        assert v(values, name, model="m2") == 0, name
        assert v(values, name, model="m3") is None, name
        family = name.removesuffix("_total")
        assert kinds[family] == ("counter" if name.endswith("_total") else "gauge"), name


def test_load_time_absent_before_first_load():
    _, values = scrape(Metrics(Pool(snap(M, state="loading"))))
    assert v(values, "mlxd:model_load_time_seconds", model=M) is None
    assert v(values, "mlxd:worker_restarts_total", model=M) == 0


def test_worker_memory_from_a_real_pid_and_absent_otherwise():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=60)  # reaped: its pid names no process any more
    pool = Pool(snap("live", pid=os.getpid()), snap("none", pid=None), snap("gone", pid=proc.pid))
    _, values = scrape(Metrics(pool))
    rss = v(values, "mlxd:worker_memory_bytes", model="live")
    assert rss is not None
    actual = psutil.Process(os.getpid()).memory_info().rss
    assert rss > 0 and abs(rss - actual) < 0.5 * actual
    assert v(values, "mlxd:worker_memory_bytes", model="none") is None
    if not psutil.pid_exists(proc.pid):
        assert v(values, "mlxd:worker_memory_bytes", model="gone") is None


@pytest.mark.parametrize("current", MODEL_STATES)
def test_model_state_is_one_hot(current):
    _, values = scrape(Metrics(Pool(snap(M, state=current), snap("m2", state="ready"))))
    for state in MODEL_STATES:
        assert v(values, "mlxd:model_state", model=M, state=state) == (1 if state == current else 0)
        assert v(values, "mlxd:model_state", model="m2", state=state) == (1 if state == "ready" else 0)
    assert (
        sum(val for (name, labels), val in values.items() if name == "mlxd:model_state" and ("model", M) in labels) == 1
    )


def test_unknown_state_is_still_exposed():
    _, values = scrape(Metrics(Pool(snap(M, state="weird"))))
    assert v(values, "mlxd:model_state", model=M, state="weird") == 1
    assert all(v(values, "mlxd:model_state", model=M, state=s) == 0 for s in MODEL_STATES)


def test_render_calls_snapshots_once_and_registries_are_private():
    pool = Pool(snap(M))
    a = Metrics(pool)
    b = Metrics(Pool(snap(M)))  # a second instance must not clash with the first
    assert pool.calls == 0  # nothing is scraped at construction
    a.render()
    assert pool.calls == 1
    a.request_started(M, now=0.0).finished(
        reason="stop", prompt_tokens=1, cached_tokens=0, completion_tokens=1, now=1.0
    )
    _, values = scrape(b)
    assert v(values, "mlxd:request_success_total", model=M, finished_reason="stop") == 0
    # a scrape through the registry itself (not render) also calls snapshots
    from prometheus_client import generate_latest

    assert b"mlxd:model_state" in generate_latest(a.registry)
    assert pool.calls == 2


class Clock:
    """A settable monotonic clock."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def ro(
    index: int = 0, completion: int = 0, reason: str | None = None, prompt: int = 10, cached: int = 0
) -> RequestOutput:
    """A RequestOutput with running totals."""
    return RequestOutput(
        request_id="r",
        index=index,
        prompt_tokens=prompt,
        cached_tokens=cached,
        completion_tokens=completion,
        finish_reason=reason,
    )


def test_worker_handle_accounting_meters_a_two_choice_request():
    """The path production uses: the worker handle's per-request record
    (``PendingRequest``) feeds the timer each output and finishes it once with the
    counts and the reason of the output that ended the request."""
    from gateway.workers.inflight import PendingRequest

    clock = Clock()
    metrics = Metrics(Pool(), clock=clock)
    clock.t = 0.0
    pending = PendingRequest(incarnation=1, n=2, timer=metrics.request_started(M), model=M)
    outputs = [
        (1.0, ro(0, 1, cached=4)),
        (1.0, ro(1, 1, cached=4)),
        (1.5, ro(0, 2, cached=4)),
        (2.0, ro(1, 3, "length", cached=4)),
        (3.0, ro(0, 3, "stop", cached=4)),
    ]
    for at, out in outputs:
        clock.t = at
        pending.record(out)
        assert pending.choices.close(out) <= 1
    assert pending.choices.done
    pending.finish("r", outputs[-1][1])
    assert pending.timer.done
    _, values = scrape(metrics)
    assert hist(values, "mlxd:time_to_first_token_seconds") == (1, 1.0)
    # choice 0: 0.5 then 1.5 (that output brought 1 token); choice 1: 1.0 over 2 tokens
    assert hist(values, "mlxd:inter_token_latency_seconds") == (4, 0.5 + 1.5 + 0.5 + 0.5)
    assert hist(values, "mlxd:e2e_request_latency_seconds") == (1, 3.0)
    assert v(values, "mlxd:request_success_total", model=M, finished_reason="stop") == 1
    assert v(values, "mlxd:generation_tokens_total", model=M) == 6
    assert v(values, "mlxd:prompt_tokens_total", model=M) == 10
    assert v(values, "mlxd:prompt_tokens_cached_total", model=M) == 4
