"""The memory budget: how much memory the gateway lets its workers use.

:class:`MemoryBudget` estimates what each model's worker needs (from its
weight files, the peaks its workers reported and the configured
``memory_estimate``), gives each new worker its MLX memory and cache
limits, and evicts the least recently used idle workers when a model
does not fit. Workers on a ``[[nodes]]`` machine count against that
machine only, and against that node's own ``memory_budget`` when its entry
sets one (else the ``[server]`` budget, per machine).

Runs on the gateway's event loop only (the pool calls it under its
start lock); evicting awaits the victims' unload.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

import psutil

from gateway.core.errors import APIError
from gateway.workers.handle import WorkerHandle
from gateway.workers.model_paths import source_bytes
from shared.config import NodeEntry, ServerConfig
from shared.config_values import parse_size

log = logging.getLogger("mlxd.gateway.pool")  # eviction lines keep the logger they had in the pool

UNKNOWN_MODEL_BYTES = 1 << 30
"""Memory assumed for a model whose files cannot be measured."""

EXPANSION = 1.5 if sys.platform == "darwin" else 4.0
"""Worker memory per byte of model files: on a CPU backend quantized
weights are expanded to float32."""

CACHE_SHARE = 0.25
"""Share of a worker's MLX memory limit its buffer cache (freed buffers
kept for reuse) may hold; the rest of the cache is given back at once."""


class MemoryBudget:
    """The budget over one pool's workers.

    ``server`` returns the current ``[server]`` settings and ``nodes`` the
    current ``[[nodes]]`` entries (both read on every call, so a reload
    applies at once); ``handles`` the pool's current
    :class:`gateway.workers.handle.WorkerHandle` objects.
    """

    def __init__(
        self,
        server: Callable[[], ServerConfig],
        handles: Callable[[], list[WorkerHandle]],
        nodes: Callable[[], list[NodeEntry]] = list,
    ) -> None:
        self._server = server
        self._handles = handles
        self._nodes = nodes

    def budget(self, node: str = "") -> int:
        """The memory budget in bytes of the machine ``node`` names (``""``:
        this one; 0: unlimited).

        A node whose ``[[nodes]]`` entry sets ``memory_budget`` has that
        size. Otherwise the ``[server]`` budget applies to each machine; a
        percentage is a share of the GPU's recommended working set once one
        of that machine's workers has reported one (Metal), else of this
        machine's physical RAM (the CPU backend, or on a Mac before the
        first worker has loaded).
        """
        entry = next((n for n in self._nodes() if n.name == node), None) if node else None
        if entry is not None and entry.memory_budget is not None:
            return parse_size(entry.memory_budget, 0)
        value = self._server().memory_budget
        whole = psutil.virtual_memory().total
        if isinstance(value, str) and value.strip().endswith("%"):
            whole = self.working_set(node) or whole
        return parse_size(value, whole)

    def working_set(self, node: str = "") -> int:
        """The GPU's recommended working set in bytes on the machine ``node``
        names, as its workers reported it (0 when none has, or off Metal)."""
        return max((h.status.working_set_bytes or 0 for h in self._handles() if h.model.node == node), default=0)

    def estimate(self, handle: WorkerHandle) -> int:
        """Bytes ``handle``'s worker is expected to use once loaded: the
        largest of a guess from the size of the model's weight files, the
        peak MLX memory its workers reported, and the configured
        ``memory_estimate``; when none is known, :data:`UNKNOWN_MODEL_BYTES`."""
        size = source_bytes(handle.model.source)
        known = max(
            int(size * EXPANSION) if size else 0,
            handle.status.peak_memory_bytes or 0,
            handle.model.memory_estimate,
        )
        return known or UNKNOWN_MODEL_BYTES

    def mlx_limits(self, handle: WorkerHandle) -> tuple[int, int | None]:
        """The MLX memory and cache limits for ``handle``'s next worker:
        the budget left by the other resident workers (at least its own
        estimate) and :data:`CACHE_SHARE` of that for MLX's buffer cache;
        ``(0, None)`` (MLX's defaults) without a budget."""
        budget = self.budget(handle.model.node)
        if not budget:
            return 0, None
        room = max(self.estimate(handle), budget - self.resident_bytes(handle))
        return room, int(room * CACHE_SHARE)

    def resident_bytes(self, skip: WorkerHandle) -> int:
        """Estimated bytes of the resident workers on the same machine as
        ``skip`` (this one, or the same node), ``skip`` itself excepted."""
        return sum(
            self.estimate(h)
            for h in self._handles()
            if h is not skip and h.resident and h.model.node == skip.model.node
        )

    async def make_room(self, handle: WorkerHandle) -> None:
        """Evict least recently used idle workers until ``handle`` fits.

        Raises:
            gateway.core.errors.APIError: 503 when not enough idle workers can go.
        """
        budget = self.budget(handle.model.node)
        if not budget:
            return
        needed = self.estimate(handle)
        while self.resident_bytes(handle) + needed > budget:
            idle = [
                h
                for h in self._handles()
                if h is not handle and h.resident and h.idle and h.model.node == handle.model.node
            ]
            if not idle:
                raise APIError(
                    503,
                    f"not enough memory to load model '{handle.model.name}' "
                    f"(needs ~{needed >> 20} MiB of a {budget >> 20} MiB budget); retry later",
                    code="insufficient_memory",
                    retry_after=10,
                )
            victim = min(idle, key=lambda h: h.last_used)
            log.info("evicting %s to make room for %s", victim.model.name, handle.model.name)
            await victim.unload(f"evicted for {handle.model.name}")
