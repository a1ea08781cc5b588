"""Prometheus metrics for ``GET /metrics``.

Two sources feed the exposition:

* **Request path** (gateway event loop): :meth:`Metrics.request_started`
  returns a :class:`RequestTimer` per request; the worker handle feeds it each
  worker output and closes it exactly once with :meth:`RequestTimer.finished`.
  These update ordinary prometheus-client
  counters and histograms.
* **Pool snapshots** (scrape time): the ``snapshots`` callable given to
  :class:`Metrics` returns one :class:`ModelSnapshot` per configured model;
  a custom collector turns the latest worker heartbeat, pid, restart count,
  load time and state into gauges and counters on every scrape. Nothing is
  accumulated from heartbeats, so worker totals are never double counted:
  when a worker restarts its totals start again from zero and the exposed
  counters follow (Prometheus treats a drop as a counter reset).

Every series carries a ``model`` label (the canonical model name). Metric
names are vLLM's with the ``mlxd:`` prefix instead of ``vllm:`` so existing
dashboards map over; buckets follow vLLM's, with a few finer low buckets
where Apple-silicon latencies are typically sub-10 ms.

Exposed series (``_total`` is appended to counters by the exposition):

============================================  =========  ==================
name                                          type       source
============================================  =========  ==================
mlxd:num_requests_running                     gauge      heartbeat
mlxd:num_requests_waiting                     gauge      heartbeat
mlxd:request_success_total{finished_reason}   counter    RequestTimer
mlxd:prompt_tokens_total                      counter    RequestTimer
mlxd:prompt_tokens_cached_total               counter    RequestTimer
mlxd:generation_tokens_total                  counter    RequestTimer
mlxd:time_to_first_token_seconds              histogram  RequestTimer
mlxd:inter_token_latency_seconds              histogram  RequestTimer
mlxd:e2e_request_latency_seconds              histogram  RequestTimer
mlxd:request_queue_time_seconds               histogram  RequestTimer
mlxd:prefix_cache_queries_total               counter    heartbeat
mlxd:prefix_cache_hits_total                  counter    heartbeat
mlxd:prefix_cache_bytes                       gauge      heartbeat
mlxd:prefix_cache_budget_bytes                gauge      heartbeat
mlxd:prefix_cache_disk_hits_total             counter    heartbeat
mlxd:prefix_cache_disk_tokens_total           counter    heartbeat
mlxd:prefix_cache_disk_bytes                  gauge      heartbeat
mlxd:prefix_cache_disk_rejected_total         counter    heartbeat
mlxd:spec_decode_num_draft_tokens_total       counter    heartbeat
mlxd:spec_decode_num_accepted_tokens_total    counter    heartbeat
mlxd:worker_restarts_total                    counter    snapshot
mlxd:worker_memory_bytes                      gauge      psutil RSS of pid
mlxd:mlx_active_memory_bytes                  gauge      heartbeat
mlxd:mlx_cache_memory_bytes                   gauge      heartbeat
mlxd:mlx_peak_memory_bytes                    gauge      heartbeat
mlxd:gpu_working_set_bytes                    gauge      snapshot (Loaded)
mlxd:model_memory_estimate_bytes              gauge      snapshot
mlxd:model_load_time_seconds                  gauge      snapshot
mlxd:model_state{state}                       gauge      snapshot (one-hot)
============================================  =========  ==================

Heartbeat series are absent for a model whose snapshot has ``stats=None``;
``worker_memory_bytes`` is absent when there is no pid or the process is
gone; ``model_load_time_seconds`` is absent before the first load. The
``mlx_*_memory_bytes`` series are MLX's own counts in the worker (on Metal
they include the GPU buffers RSS misses; ``Loaded`` seeds them until the
first heartbeat). ``gpu_working_set_bytes`` (the device's recommended
working set) is absent off Metal; ``model_memory_estimate_bytes`` is what
the memory budget counts for the model, also while it is unloaded.

Everything runs on the gateway's event-loop thread; no locking beyond
prometheus-client's own is needed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterator

import psutil
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from shared.protocol import WorkerStats

PREFIX = "mlxd:"
"""Prefix of every metric name (vLLM uses ``vllm:``)."""

FINISHED_REASONS: tuple[str, ...] = ("stop", "length", "tool_calls", "abort", "error")
"""Values of the ``finished_reason`` label, pre-created at zero for each model."""

MODEL_STATES: tuple[str, ...] = (
    "unloaded",
    "starting",
    "loading",
    "ready",
    "draining",
    "restarting",
    "failed",
    "stopped",
)
"""Values of the ``state`` label of ``mlxd:model_state``; exactly one is 1."""

TTFT_BUCKETS: tuple[float, ...] = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
"""Time-to-first-token buckets (seconds), as vLLM's."""

ITL_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.0075,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
"""Inter-token latency buckets (seconds): vLLM's plus four below 10 ms."""

E2E_BUCKETS: tuple[float, ...] = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
"""End-to-end request latency buckets (seconds), as vLLM's."""

QUEUE_BUCKETS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1) + E2E_BUCKETS
"""Queue-time buckets: vLLM's request-latency buckets plus six below 0.3 s
(an idle worker admits a request within milliseconds)."""


@dataclass(frozen=True)
class ModelSnapshot:
    """What the pool reports about one model at scrape time.

    ``name`` is the canonical model name (the ``model`` label). ``state`` is
    one of :data:`MODEL_STATES` (any other value is exposed as an extra
    ``state`` label set to 1). ``pid`` is the live worker process, None when
    there is none. ``restarts`` counts worker restarts since the gateway
    started. ``load_seconds`` is the duration of the last model load (None
    before the first). ``stats`` is the latest heartbeat of the *current*
    worker incarnation, None before its first heartbeat.
    ``working_set_bytes`` is the device's recommended working set (None or
    0: unknown or not Metal) and ``memory_estimate`` the bytes the memory
    budget counts for this model (None: not reported). ``node`` names the
    ``[[nodes]]`` entry running the worker (None: this machine; ``pid`` is
    then a pid on the node, so no local resident size is read for it).
    """

    name: str
    state: str
    pid: int | None
    restarts: int
    load_seconds: float | None
    stats: WorkerStats | None
    working_set_bytes: int | None = None
    memory_estimate: int | None = None
    node: str | None = None


class Metrics:
    """The gateway's metric registry and its request-path entry point.

    ``snapshots`` is called at scrape time (from :meth:`render`, on the event
    loop) and must return one :class:`ModelSnapshot` per configured model;
    it must be cheap and must not block. ``registry`` defaults to a private
    :class:`~prometheus_client.CollectorRegistry` (never the process-global
    one), so any number of instances can coexist. ``clock`` supplies the
    default ``now`` of every timing call (tests pass a fake one).
    """

    def __init__(
        self,
        snapshots: Callable[[], list[ModelSnapshot]],
        registry: CollectorRegistry | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.clock = clock
        self.registry = registry if registry is not None else CollectorRegistry()
        self._snapshots = snapshots
        self._known_models: set[str] = set()
        self._collector = _SnapshotCollector(snapshots)
        self.registry.register(self._collector)

        r = self.registry
        self.request_success = Counter(
            PREFIX + "request_success",
            "Count of finished requests by finish reason.",
            ["model", "finished_reason"],
            registry=r,
        )
        self.prompt_tokens = Counter(
            PREFIX + "prompt_tokens",
            "Prompt tokens of finished requests (cached ones included).",
            ["model"],
            registry=r,
        )
        self.prompt_tokens_cached = Counter(
            PREFIX + "prompt_tokens_cached",
            "Prompt tokens reused from the prefix cache.",
            ["model"],
            registry=r,
        )
        self.generation_tokens = Counter(
            PREFIX + "generation_tokens",
            "Generated (completion) tokens, counted as they stream.",
            ["model"],
            registry=r,
        )
        self.time_to_first_token = Histogram(
            PREFIX + "time_to_first_token_seconds",
            "Time from request arrival to its first generated token.",
            ["model"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.inter_token_latency = Histogram(
            PREFIX + "inter_token_latency_seconds",
            "Time between generated tokens of a choice, one observation per token.",
            ["model"],
            buckets=ITL_BUCKETS,
            registry=r,
        )
        self.e2e_request_latency = Histogram(
            PREFIX + "e2e_request_latency_seconds",
            "Time from request arrival to its end, whatever the outcome.",
            ["model"],
            buckets=E2E_BUCKETS,
            registry=r,
        )
        self.request_queue_time = Histogram(
            PREFIX + "request_queue_time_seconds",
            "Time a request waited in the worker before it started decoding.",
            ["model"],
            buckets=QUEUE_BUCKETS,
            registry=r,
        )

    def _ensure_model(self, model: str) -> None:
        """Create every request series of ``model`` at zero, once."""
        if model in self._known_models:
            return
        self._known_models.add(model)
        for reason in FINISHED_REASONS:
            self.request_success.labels(model, reason)
        for metric in (
            self.prompt_tokens,
            self.prompt_tokens_cached,
            self.generation_tokens,
            self.time_to_first_token,
            self.inter_token_latency,
            self.e2e_request_latency,
            self.request_queue_time,
        ):
            metric.labels(model)

    def request_started(self, model: str, *, now: float | None = None) -> RequestTimer:
        """Start timing one request for canonical model ``model``.

        Call it when the request arrives (before validation/queueing costs
        you want included in TTFT and e2e latency). ``now`` is a
        :func:`time.monotonic` value, defaulting to the metrics' clock.
        """
        self._ensure_model(model)
        return RequestTimer(self, model, self.clock() if now is None else now)

    def render(self) -> tuple[bytes, str]:
        """The ``GET /metrics`` response: exposition body and content type.

        Calls ``snapshots`` exactly once. Models seen in snapshots get all
        their request series at zero even before their first request.
        """
        snaps = self._snapshots()
        for snap in snaps:
            self._ensure_model(snap.name)
        self._collector.pending = snaps
        try:
            body = generate_latest(self.registry)
        finally:
            self._collector.pending = None
        return body, CONTENT_TYPE_LATEST


class RequestTimer:
    """Per-request timing and counting; obtain one from :meth:`Metrics.request_started`.

    Methods are cheap (a few arithmetic operations and histogram
    observations) so they can be called for every streamed output on the
    event loop. All ``now`` arguments are :func:`time.monotonic` values and
    default to the :class:`Metrics` clock. After :meth:`finished` every call
    is ignored.

    Semantics:

    * TTFT: observed once, at the first output of the request (any choice)
      carrying ``tokens > 0``, as ``now - start``.
    * Inter-token latency: per choice. The first output of a choice with
      tokens starts its clock (it is not an ITL sample); every later output
      with ``tokens = k > 0`` observes ``gap / k`` **k times**, where ``gap``
      is the time since that choice's previous output with tokens. So the
      histogram counts one sample per decoded token after a choice's first
      (as vLLM does per token) and its ``_sum`` is total decode time.
      Outputs with ``tokens == 0`` neither observe nor move the clock.
    * ``generation_tokens_total`` grows with each output's ``tokens`` so
      throughput is visible while long generations stream; :meth:`finished`
      tops it up to ``completion_tokens`` if fewer were reported.
    """

    __slots__ = (
        "_metrics",
        "model",
        "start",
        "_done",
        "_first_token",
        "_last_token_at",
        "_generated",
        "_queued",
        "_gen",
        "_ttft",
        "_itl",
    )

    def __init__(self, metrics: Metrics, model: str, start: float) -> None:
        """Use :meth:`Metrics.request_started` instead of constructing this."""
        self._metrics = metrics
        self.model = model
        self.start = start
        self._done = False
        self._first_token = False
        self._last_token_at: dict[int, float] = {}
        self._generated = 0
        self._queued = False
        # label children resolved once: the per-output path does no lookups
        self._gen = metrics.generation_tokens.labels(model)
        self._ttft = metrics.time_to_first_token.labels(model)
        self._itl = metrics.inter_token_latency.labels(model)

    @property
    def done(self) -> bool:
        """True once :meth:`finished` has been called."""
        return self._done

    def output(self, *, tokens: int, now: float | None = None, index: int = 0) -> None:
        """Record a worker output carrying ``tokens`` new completion tokens of choice ``index``.

        ``tokens`` may be 0 (text held back, final output without a token).
        See the class docstring for how TTFT and inter-token latency are
        derived.
        """
        if self._done or tokens <= 0:
            return
        t = self._metrics.clock() if now is None else now
        self._generated += tokens
        self._gen.inc(tokens)
        if not self._first_token:
            self._first_token = True
            self._ttft.observe(max(0.0, t - self.start))
        last = self._last_token_at.get(index)
        self._last_token_at[index] = t
        if last is not None:
            per_token = max(0.0, t - last) / tokens
            observe = self._itl.observe
            for _ in range(tokens):
                observe(per_token)

    def queued(self, seconds: float) -> None:
        """Observe the worker-reported queue time of this request (first call only)."""
        if self._done or self._queued:
            return
        self._queued = True
        self._metrics.request_queue_time.labels(self.model).observe(max(0.0, seconds))

    def finished(
        self,
        *,
        reason: str,
        prompt_tokens: int,
        cached_tokens: int,
        completion_tokens: int,
        now: float | None = None,
    ) -> None:
        """End the request: count it and observe its end-to-end latency.

        Effective exactly once; later calls are ignored, so it is safe in a
        ``finally`` block after an earlier explicit call.

        ``reason`` is one of :data:`FINISHED_REASONS`: ``abort`` when the
        client went away or the server shut down, ``error`` for any failure.
        ``prompt_tokens`` is the whole prompt (cached tokens included),
        ``cached_tokens`` the part reused from the prefix cache and
        ``completion_tokens`` the tokens generated over all choices (tokens
        not yet seen through :meth:`output` are counted now).
        """
        if self._done:
            return
        self._done = True
        t = self._metrics.clock() if now is None else now
        m = self._metrics
        model = self.model
        m.request_success.labels(model, reason).inc()
        if prompt_tokens > 0:
            m.prompt_tokens.labels(model).inc(prompt_tokens)
        if cached_tokens > 0:
            m.prompt_tokens_cached.labels(model).inc(cached_tokens)
        missing = completion_tokens - self._generated
        if missing > 0:
            self._gen.inc(missing)
        m.e2e_request_latency.labels(model).observe(max(0.0, t - self.start))


class _SnapshotCollector(Collector):
    """Builds the pool-derived series from fresh snapshots on every collect."""

    def __init__(self, snapshots: Callable[[], list[ModelSnapshot]]) -> None:
        self._snapshots = snapshots
        # set by Metrics.render so one scrape calls snapshots() once
        self.pending: list[ModelSnapshot] | None = None

    def describe(self) -> list[Metric]:
        """No static description: the registry must not call snapshots() at register time."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Yield one family per pool-derived metric, one sample per model."""
        snaps = self.pending if self.pending is not None else self._snapshots()

        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(PREFIX + name, doc, labels=["model"])

        def counter(name: str, doc: str) -> CounterMetricFamily:
            return CounterMetricFamily(PREFIX + name, doc, labels=["model"])

        running = gauge("num_requests_running", "Sequences decoding in the worker (latest heartbeat).")
        waiting = gauge("num_requests_waiting", "Requests admitted but not yet decoding (latest heartbeat).")
        queries = counter("prefix_cache_queries", "Prefix cache look-ups since the worker started.")
        hits = counter("prefix_cache_hits", "Prefix cache look-ups that reused anything, since the worker started.")
        cache_bytes = gauge("prefix_cache_bytes", "Bytes held by the prefix cache.")
        budget = gauge("prefix_cache_budget_bytes", "Byte budget of the prefix cache.")
        disk_hits = counter("prefix_cache_disk_hits", "Prefix cache look-ups served from the disk tier.")
        disk_tokens = counter("prefix_cache_disk_tokens", "Prompt tokens loaded from the prefix cache's disk tier.")
        disk_bytes = gauge("prefix_cache_disk_bytes", "Bytes of prefix cache entries on disk.")
        disk_rejected = counter(
            "prefix_cache_disk_rejected", "Disk cache files rejected (truncated, corrupt or another model's)."
        )
        drafted = counter("spec_decode_num_draft_tokens", "Tokens drafted by speculative decoding.")
        accepted = counter("spec_decode_num_accepted_tokens", "Drafted tokens that verification accepted.")
        restarts = counter("worker_restarts", "Worker restarts since the gateway started.")
        memory = gauge("worker_memory_bytes", "Resident set size of the worker process.")
        load = gauge("model_load_time_seconds", "Duration of the last model load.")
        mlx_active = gauge("mlx_active_memory_bytes", "Memory MLX has in use in the worker (latest heartbeat).")
        mlx_cache = gauge("mlx_cache_memory_bytes", "Freed memory MLX keeps cached for reuse (latest heartbeat).")
        mlx_peak = gauge("mlx_peak_memory_bytes", "Most memory MLX had in use since the worker started.")
        working_set = gauge("gpu_working_set_bytes", "The GPU's recommended working set (Metal only).")
        estimate = gauge("model_memory_estimate_bytes", "Bytes the memory budget counts for the model.")
        state = GaugeMetricFamily(
            PREFIX + "model_state",
            "1 for the model's current state, 0 for the others.",
            labels=["model", "state"],
        )
        node = GaugeMetricFamily(
            PREFIX + "model_node",
            "1 for the machine running the model's worker (node label; local = this machine).",
            labels=["model", "node"],
        )

        for s in snaps:
            node.add_metric([s.name, s.node or "local"], 1.0)
            labels = [s.name]
            st = s.stats
            if st is not None:
                running.add_metric(labels, st.running)
                waiting.add_metric(labels, st.waiting)
                queries.add_metric(labels, st.cache_queries)
                hits.add_metric(labels, st.cache_hits)
                cache_bytes.add_metric(labels, st.cache_bytes)
                budget.add_metric(labels, st.cache_budget_bytes)
                disk_hits.add_metric(labels, st.disk_cache_hits)
                disk_tokens.add_metric(labels, st.disk_cached_tokens)
                disk_bytes.add_metric(labels, st.disk_cache_bytes)
                disk_rejected.add_metric(labels, st.disk_cache_rejected)
                drafted.add_metric(labels, st.draft_tokens)
                accepted.add_metric(labels, st.draft_accepted_tokens)
                mlx_active.add_metric(labels, st.active_memory_bytes)
                mlx_cache.add_metric(labels, st.cache_memory_bytes)
                mlx_peak.add_metric(labels, st.peak_memory_bytes)
            if s.working_set_bytes:
                working_set.add_metric(labels, s.working_set_bytes)
            if s.memory_estimate is not None:
                estimate.add_metric(labels, s.memory_estimate)
            restarts.add_metric(labels, s.restarts)
            rss = _rss(s.pid) if s.node is None else None
            if rss is not None:
                memory.add_metric(labels, rss)
            if s.load_seconds is not None:
                load.add_metric(labels, s.load_seconds)
            for name in MODEL_STATES:
                state.add_metric([s.name, name], 1.0 if name == s.state else 0.0)
            if s.state not in MODEL_STATES:
                state.add_metric([s.name, s.state], 1.0)

        yield from (running, waiting, queries, hits, cache_bytes, budget, restarts, memory, load, state)
        yield from (disk_hits, disk_tokens, disk_bytes, disk_rejected)
        yield from (mlx_active, mlx_cache, mlx_peak, working_set, estimate, node)
        yield from (drafted, accepted)


def _rss(pid: int | None) -> int | None:
    """Resident set size of process ``pid`` in bytes, None if unknown or gone."""
    if pid is None:
        return None
    try:
        return psutil.Process(pid).memory_info().rss
    except (psutil.Error, OSError):
        return None
