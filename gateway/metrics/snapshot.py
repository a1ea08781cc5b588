"""The pool-derived series of ``GET /metrics``, built at scrape time.

The pool reports one :class:`ModelSnapshot` per configured model;
:class:`SnapshotCollector` (registered by :class:`gateway.metrics.registry.Metrics`)
turns the latest worker heartbeat, pid, restart count, load time and
state into gauges and counters on every scrape. Nothing is accumulated
from heartbeats, so worker totals are never double counted (a restarted
worker's totals start again from zero, which Prometheus reads as a
counter reset). The series are listed in :mod:`gateway.metrics.registry`.

Runs on the gateway's event loop (inside ``Metrics.render``); the only
outside read is the worker's resident size through
:func:`gateway.workers.status.resident_bytes`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.workers.status import resident_bytes
from shared.protocol import WorkerStats

PREFIX = "mlxd:"
"""Prefix of every metric name, here and in :mod:`gateway.metrics.registry` (vLLM
uses ``vllm:``)."""

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


# a table: one row a series, kept on one line each
# fmt: off
HEARTBEAT_SERIES: tuple[tuple[str, str, str, str], ...] = (
    ("gauge", "num_requests_running", "Sequences decoding in the worker (latest heartbeat).", "running"),
    ("gauge", "num_requests_waiting", "Requests admitted but not yet decoding (latest heartbeat).", "waiting"),
    ("counter", "prefix_cache_queries", "Prefix cache look-ups since the worker started.", "cache_queries"),
    ("counter", "prefix_cache_hits", "Prefix cache look-ups that reused anything, since the worker started.", "cache_hits"),
    ("gauge", "prefix_cache_bytes", "Bytes held by the prefix cache.", "cache_bytes"),
    ("gauge", "prefix_cache_budget_bytes", "Byte budget of the prefix cache.", "cache_budget_bytes"),
    ("counter", "prefix_cache_disk_hits", "Prefix cache look-ups served from the disk tier.", "disk_cache_hits"),
    ("counter", "prefix_cache_disk_tokens", "Prompt tokens loaded from the prefix cache's disk tier.", "disk_cached_tokens"),
    ("gauge", "prefix_cache_disk_bytes", "Bytes of prefix cache entries on disk.", "disk_cache_bytes"),
    ("counter", "prefix_cache_disk_rejected", "Disk cache files rejected (truncated, corrupt or another model's).", "disk_cache_rejected"),
    ("counter", "prefix_cache_refused", "States the prefix cache refused to store: they did not hold exactly their key's tokens (a bug if ever above 0).", "cache_refused"),
    ("counter", "spec_decode_num_draft_tokens", "Tokens drafted by speculative decoding.", "draft_tokens"),
    ("counter", "spec_decode_num_accepted_tokens", "Drafted tokens that verification accepted.", "draft_accepted_tokens"),
    ("counter", "spec_decode_num_drafts", "Engine steps that verified speculative drafts.", "draft_steps"),
    ("counter", "vision_prefills", "Prompts whose images went through the vision tower.", "vision_prefills"),
    ("counter", "vision_image_tokens", "Image, video and audio tokens of the prompts that went through the vision or audio tower.", "vision_image_tokens"),
    ("counter", "rerank_pairs", "Query-document pairs a rerank worker scored.", "rerank_pairs"),
    ("counter", "audio_seconds_in", "Seconds of audio a transcription worker transcribed.", "audio_seconds_in"),
    ("gauge", "mlx_active_memory_bytes", "Memory MLX has in use in the worker (latest heartbeat).", "active_memory_bytes"),
    ("gauge", "mlx_cache_memory_bytes", "Freed memory MLX keeps cached for reuse (latest heartbeat).", "cache_memory_bytes"),
    ("gauge", "mlx_peak_memory_bytes", "Most memory MLX had in use since the worker started.", "peak_memory_bytes"),
    ("gauge", "kv_cache_bytes", "Bytes the KV caches of the running sequences are bounded by (the KV budget's accounting).", "kv_bytes"),
    ("gauge", "kv_cache_tokens", "Tokens the KV caches of the running sequences hold, all together (the KV budget's accounting).", "kv_tokens"),
    ("gauge", "kv_budget_bytes", "The model's KV-memory budget in bytes (0: no budget).", "kv_budget_bytes"),
    ("gauge", "num_requests_waiting_for_memory", "Requests (choices) waiting for KV memory (latest heartbeat).", "kv_waiting"),
    ("counter", "kv_preemptions", "Running sequences preempted because the running sequences outgrew the KV budget.", "kv_preemptions"),
    ("counter", "kv_waited_requests", "Requests that had to wait for KV memory before starting.", "kv_waited"),
)
# fmt: on
"""The series read from a worker's latest heartbeat: (``gauge`` or
``counter``, name without the prefix, help text, :class:`WorkerStats`
field). Absent for a model whose snapshot has no ``stats``."""


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


class SnapshotCollector(Collector):
    """Builds the pool-derived series from fresh snapshots on every collect.

    ``snapshots`` is the pool's callable; :attr:`pending`, when set (by
    :meth:`gateway.metrics.registry.Metrics.render`), is used instead so one scrape
    calls ``snapshots`` once."""

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

        heartbeat = {name: _family(kind, name, doc) for kind, name, doc, _ in HEARTBEAT_SERIES}
        restarts = _family("counter", "worker_restarts", "Worker restarts since the gateway started.")
        memory = _family("gauge", "worker_memory_bytes", "Resident set size of the worker process.")
        load = _family("gauge", "model_load_time_seconds", "Duration of the last model load.")
        working_set = _family("gauge", "gpu_working_set_bytes", "The GPU's recommended working set (Metal only).")
        estimate = _family("gauge", "model_memory_estimate_bytes", "Bytes the memory budget counts for the model.")
        state = GaugeMetricFamily(
            PREFIX + "model_state",
            "1 for the model's current state, 0 for the others.",
            labels=["model", "state"],
        )
        skipped = CounterMetricFamily(
            PREFIX + "spec_decode_skipped_steps",
            "Engine steps that did not speculate, by reason (batch, no_rows, no_gain, ledger, timing, no_draft).",
            labels=["model", "reason"],
        )
        acceptance = _family(
            "gauge", "spec_decode_acceptance_rate", "Drafted tokens accepted, as a share of those drafted (since load)."
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
                for _, name, _, field in HEARTBEAT_SERIES:
                    heartbeat[name].add_metric(labels, getattr(st, field))
                for reason, count in sorted(st.draft_skipped_steps.items()):
                    skipped.add_metric([s.name, reason], count)
                if st.draft_tokens:
                    acceptance.add_metric(labels, st.draft_accepted_tokens / st.draft_tokens)
            if s.working_set_bytes:
                working_set.add_metric(labels, s.working_set_bytes)
            if s.memory_estimate is not None:
                estimate.add_metric(labels, s.memory_estimate)
            restarts.add_metric(labels, s.restarts)
            rss = resident_bytes(s.pid) if s.node is None else None
            if rss is not None:
                memory.add_metric(labels, rss)
            if s.load_seconds is not None:
                load.add_metric(labels, s.load_seconds)
            for name in MODEL_STATES:
                state.add_metric([s.name, name], 1.0 if name == s.state else 0.0)
            if s.state not in MODEL_STATES:
                state.add_metric([s.name, s.state], 1.0)

        yield from heartbeat.values()
        yield from (skipped, acceptance, restarts, memory, load, state, working_set, estimate, node)


def _family(kind: str, name: str, doc: str) -> GaugeMetricFamily | CounterMetricFamily:
    """An empty ``model``-labelled gauge or counter family named ``mlxd:<name>``."""
    family = GaugeMetricFamily if kind == "gauge" else CounterMetricFamily
    return family(PREFIX + name, doc, labels=["model"])
