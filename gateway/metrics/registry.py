"""Prometheus metrics for ``GET /metrics``.

Two sources feed the exposition:

* **Request path** (gateway event loop): :meth:`Metrics.request_started`
  returns a :class:`gateway.metrics.request_timer.RequestTimer` per request; the
  worker handle's accounting (:mod:`gateway.workers.inflight`) feeds it each
  worker output and closes it exactly once with its ``finished``. These
  update ordinary prometheus-client counters and histograms, which this
  module declares.
* **Pool snapshots** (scrape time): the ``snapshots`` callable given to
  :class:`Metrics` returns one :class:`gateway.metrics.snapshot.ModelSnapshot`
  per configured model; the collector of :mod:`gateway.metrics.snapshot` turns the latest worker heartbeat, pid, restart count,
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
mlxd:prefix_cache_refused_total               counter    heartbeat
mlxd:spec_decode_num_draft_tokens_total       counter    heartbeat
mlxd:spec_decode_num_accepted_tokens_total    counter    heartbeat
mlxd:spec_decode_num_drafts_total             counter    heartbeat
mlxd:spec_decode_skipped_steps_total{reason}  counter    heartbeat
mlxd:spec_decode_acceptance_rate              gauge      heartbeat
mlxd:vision_prefills_total                    counter    heartbeat
mlxd:vision_image_tokens_total                counter    heartbeat
mlxd:rerank_pairs_total                       counter    heartbeat
mlxd:audio_seconds_in_total                   counter    heartbeat
mlxd:worker_restarts_total                    counter    snapshot
mlxd:worker_memory_bytes                      gauge      psutil RSS of pid
mlxd:mlx_active_memory_bytes                  gauge      heartbeat
mlxd:mlx_cache_memory_bytes                   gauge      heartbeat
mlxd:mlx_peak_memory_bytes                    gauge      heartbeat
mlxd:kv_cache_bytes                           gauge      heartbeat
mlxd:kv_cache_tokens                          gauge      heartbeat
mlxd:kv_budget_bytes                          gauge      heartbeat
mlxd:num_requests_waiting_for_memory          gauge      heartbeat
mlxd:kv_preemptions_total                     counter    heartbeat
mlxd:kv_waited_requests_total                 counter    heartbeat
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
The ``kv_*`` series and ``num_requests_waiting_for_memory`` are the
worker's KV-memory budget (``kv_budget_bytes`` 0: the model has none).

Everything runs on the gateway's event-loop thread; no locking beyond
prometheus-client's own is needed.
"""

from __future__ import annotations

import time
from typing import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

from gateway.metrics.request_timer import RequestSeries, RequestTimer
from gateway.metrics.snapshot import PREFIX, ModelSnapshot, SnapshotCollector

FINISHED_REASONS: tuple[str, ...] = ("stop", "length", "tool_calls", "abort", "error")
"""Values of the ``finished_reason`` label, pre-created at zero for each model."""

# bucket lists are data: kept as rows of values, not one value a line
# fmt: off
TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
"""Time-to-first-token buckets (seconds), as vLLM's."""

ITL_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
    0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)
"""Inter-token latency buckets (seconds): vLLM's plus four below 10 ms."""

E2E_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)
"""End-to-end request latency buckets (seconds), as vLLM's."""
# fmt: on

QUEUE_BUCKETS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1) + E2E_BUCKETS
"""Queue-time buckets: vLLM's request-latency buckets plus six below 0.3 s
(an idle worker admits a request within milliseconds)."""


class Metrics:
    """The gateway's metric registry and its request-path entry point.

    ``snapshots`` is called at scrape time (from :meth:`render`, on the event
    loop) and must return one
    :class:`gateway.metrics.snapshot.ModelSnapshot` per configured model;
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
        self._collector = SnapshotCollector(snapshots)
        self.registry.register(self._collector)

        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(PREFIX + name, doc, ["model", *labels], registry=self.registry)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(PREFIX + name, doc, ["model"], buckets=buckets, registry=self.registry)

        self.request_success = counter(
            "request_success", "Count of finished requests by finish reason.", "finished_reason"
        )
        self.prompt_tokens = counter("prompt_tokens", "Prompt tokens of finished requests (cached ones included).")
        self.prompt_tokens_cached = counter("prompt_tokens_cached", "Prompt tokens reused from the prefix cache.")
        self.generation_tokens = counter("generation_tokens", "Generated (completion) tokens, counted as they stream.")
        self.time_to_first_token = histogram(
            "time_to_first_token_seconds", "Time from request arrival to its first generated token.", TTFT_BUCKETS
        )
        self.inter_token_latency = histogram(
            "inter_token_latency_seconds",
            "Time between generated tokens of a choice, one observation per token.",
            ITL_BUCKETS,
        )
        self.e2e_request_latency = histogram(
            "e2e_request_latency_seconds", "Time from request arrival to its end, whatever the outcome.", E2E_BUCKETS
        )
        self.audio_seconds_out = counter("audio_seconds_out", "Seconds of audio synthesised by speech models.")
        self.request_queue_time = histogram(
            "request_queue_time_seconds",
            "Time a request waited in the worker before it started decoding.",
            QUEUE_BUCKETS,
        )

        self._series = RequestSeries(
            clock=clock,
            request_success=self.request_success,
            prompt_tokens=self.prompt_tokens,
            prompt_tokens_cached=self.prompt_tokens_cached,
            generation_tokens=self.generation_tokens,
            time_to_first_token=self.time_to_first_token,
            inter_token_latency=self.inter_token_latency,
            e2e_request_latency=self.e2e_request_latency,
            request_queue_time=self.request_queue_time,
            audio_seconds_out=self.audio_seconds_out,
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
            self.audio_seconds_out,
        ):
            metric.labels(model)

    def request_started(self, model: str, *, now: float | None = None, request_id: str = "") -> RequestTimer:
        """Start timing one request for canonical model ``model``.

        Call it when the request arrives (before validation/queueing costs
        you want included in TTFT and e2e latency). ``now`` is a
        :func:`time.monotonic` value, defaulting to the metrics' clock.
        ``request_id`` is kept on the timer (for wrappers that also record
        the request, see :mod:`gateway.dashboard.recorder`).
        """
        self._ensure_model(model)
        return RequestTimer(self._series, model, self.clock() if now is None else now, request_id)

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
