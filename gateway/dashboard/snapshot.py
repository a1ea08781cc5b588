"""Building the status snapshot (:class:`gateway.dashboard.schema.Status`)
from state the gateway already has.

:class:`StatusBuilder` reads the worker pool (each model's
:class:`gateway.workers.handle.WorkerHandle`: its state, last error, latest
heartbeat :class:`shared.protocol.WorkerStats`, requests in flight), the
MCP hub's session states and the :class:`gateway.dashboard.recorder.ActivityRecorder`
buffers. Nothing is asked of the workers: a snapshot costs a walk over the
configured models and two short lists. The one outside read, the size of a
model's weight files behind the memory budget's estimate, is remembered
for :data:`ESTIMATE_SECONDS`.

Runs on the gateway's event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib import metadata
from typing import Any

from gateway.dashboard.recorder import ActivityRecorder, Gauges
from gateway.dashboard.schema import (
    DiskTierStatus,
    KVStatus,
    McpServerStatus,
    MemoryStatus,
    ModelStatus,
    NodeStatus,
    PrefixCacheStatus,
    SpeculationStatus,
    Status,
)
from shared.protocol import WorkerStats

ESTIMATE_SECONDS = 10.0
"""How long a model's memory estimate (which measures its weight files on
disk) is reused before it is computed again."""

_UP_STATES = frozenset({"starting", "loading", "ready", "draining"})
"""Worker states in which a node's session is open."""

_DOWN_STATES = frozenset({"restarting", "failed"})
"""Worker states that say a node's session ended badly."""


def mlxd_version() -> str:
    """The installed mlxd version (``0.0.0`` when not installed)."""
    try:
        return metadata.version("mlxd")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def ratio(part: int, whole: int) -> float | None:
    """``part / whole``; None when ``whole`` is 0 (nothing counted yet)."""
    return part / whole if whole else None


class StatusBuilder:
    """Snapshots of one gateway: its worker ``pool``
    (:class:`gateway.workers.pool.WorkerPool`), its MCP ``hub``
    (:class:`gateway.mcp.client.McpHub`) and ``recorder``. ``wall`` is Unix
    time (tests pass a fake); the gateway's start time is taken at
    construction."""

    def __init__(self, pool: Any, hub: Any, recorder: ActivityRecorder, *, wall: Callable[[], float] = time.time):
        self.pool = pool
        self.hub = hub
        self.recorder = recorder
        self.wall = wall
        self.started_at = wall()
        self.version = mlxd_version()
        self._estimates: dict[str, tuple[float, int]] = {}

    def gauges(self) -> Gauges:
        """MLX memory in use per model with a worker, and the running and
        waiting sequences over all workers (what each sample records)."""
        memory: dict[str, int] = {}
        running = waiting = 0
        for name, handle in list(self.pool.handles.items()):
            status = handle.status
            if status.pid is None:
                continue
            memory[name] = status.stats.active_memory_bytes
            running += status.stats.running
            waiting += status.stats.waiting
        return memory, running, waiting

    def status(self, since: float | None = None) -> Status:
        """The snapshot now; ``samples`` only after Unix time ``since`` when
        given."""
        pool = self.pool
        models = [self._model(m.name, pool.handles[m.name], m) for m in pool.config.models if m.name in pool.handles]
        return Status(
            version=self.version,
            time=self.wall(),
            started_at=self.started_at,
            draining=bool(pool.draining),
            memory_budget_bytes=pool.memory.budget(),
            models=models,
            samples=self.recorder.samples(since),
            requests=self.recorder.recent(),
            mcp_servers=self._mcp_servers(),
            nodes=self._nodes(),
        )

    # -- parts ------------------------------------------------------------------

    def _estimate(self, name: str, handle: Any) -> int:
        now = time.monotonic()
        cached = self._estimates.get(name)
        if cached is not None and now - cached[0] < ESTIMATE_SECONDS:
            return cached[1]
        value = self.pool.memory.estimate(handle)
        self._estimates[name] = (now, value)
        return value

    def _model(self, name: str, handle: Any, config: Any) -> ModelStatus:
        status = handle.status
        stats: WorkerStats = status.stats if status.pid is not None else WorkerStats()
        speculation = None
        method = status.speculation if status.speculation is not None else config.speculative
        if method and method != "none":
            speculation = SpeculationStatus(
                method=method,
                draft_tokens=stats.draft_tokens,
                accepted_tokens=stats.draft_accepted_tokens,
                acceptance=ratio(stats.draft_accepted_tokens, stats.draft_tokens),
            )
        return ModelStatus(
            name=name,
            aliases=list(config.aliases),
            kind=self.pool.kind(name),
            state=status.state,
            error=status.last_error,
            node=status.node,
            pid=status.pid,
            restarts=status.restarts,
            load_seconds=status.load_seconds,
            context_length=status.context_length,
            inflight=handle.inflight,
            running=stats.running,
            waiting=stats.waiting,
            requests_finished=stats.requests_finished,
            generated_tokens=stats.generated_tokens,
            memory=MemoryStatus(
                mlx_active_bytes=stats.active_memory_bytes,
                mlx_cache_bytes=stats.cache_memory_bytes,
                mlx_peak_bytes=status.peak_memory_bytes or 0,
                limit_bytes=status.memory_limit_bytes or 0,
                estimate_bytes=self._estimate(name, handle),
                resident_bytes=status.memory_bytes if status.pid is not None else None,
            ),
            prefix_cache=PrefixCacheStatus(
                queries=stats.cache_queries,
                hits=stats.cache_hits,
                hit_rate=ratio(stats.cache_hits, stats.cache_queries),
                cached_tokens=stats.cached_tokens,
                entries=stats.cache_entries,
                bytes=stats.cache_bytes,
                budget_bytes=stats.cache_budget_bytes,
            ),
            disk_cache=DiskTierStatus(
                hits=stats.disk_cache_hits,
                hit_rate=ratio(stats.disk_cache_hits, stats.cache_queries),
                cached_tokens=stats.disk_cached_tokens,
                entries=stats.disk_cache_entries,
                bytes=stats.disk_cache_bytes,
                writes=stats.disk_cache_writes,
                rejected=stats.disk_cache_rejected,
            ),
            speculation=speculation,
            kv=KVStatus(
                bytes=stats.kv_bytes,
                budget_bytes=stats.kv_budget_bytes,
                waiting=stats.kv_waiting,
                preemptions=stats.kv_preemptions,
                waited=stats.kv_waited,
                tokens=stats.kv_tokens,
            ),
            expires_at=handle.expires_at(),
        )

    def _mcp_servers(self) -> list[McpServerStatus]:
        hub = self.hub
        if hub is None:
            return []
        counts: dict[str, int] = {}
        for tool in hub.tools():
            counts[tool.server] = counts.get(tool.server, 0) + 1
        return [
            McpServerStatus(
                name=s["name"],
                transport=s["transport"],
                connected=bool(s["connected"]),
                error=s["error"],
                tools=counts.get(s["name"], 0),
            )
            for s in hub.status()
        ]

    def _nodes(self) -> list[NodeStatus]:
        pool = self.pool
        found = []
        for entry in pool.config.nodes:
            handles = [h for h in pool.handles.values() if h.model.node == entry.name]
            states = [h.status.state for h in handles]
            down = next((h for h in handles if h.status.state in _DOWN_STATES), None)
            if any(s in _UP_STATES for s in states):
                state, error = "up", None
            elif down is not None:
                state, error = "down", down.status.last_error
            else:
                state, error = "idle", None
            found.append(
                NodeStatus(
                    name=entry.name,
                    address=entry.address,
                    state=state,
                    error=error,
                    models=[h.model.name for h in handles],
                )
            )
        return found
