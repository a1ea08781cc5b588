"""What the gateway knows about one model's worker, for ``/health``,
``/metrics`` and the memory budget.

:class:`WorkerStatus` is the record a :class:`gateway.workers.handle.WorkerHandle`
keeps up to date from its worker's messages; :func:`resident_bytes` reads
a local process's resident memory (the one place that asks psutil for it).

Everything here runs on the gateway's event loop; nothing blocks but one
psutil read of ``/proc`` (or the macOS equivalent) per call of
:func:`resident_bytes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
import psutil

from shared.protocol import Loaded, SamplingDefaults, WorkerStats


@dataclass
class WorkerStatus:
    """What the gateway knows about a model's worker (for /health and
    /metrics). ``memory_bytes`` is the worker's resident memory measured
    when it became ready (informational: on macOS it misses Metal buffers);
    ``sampling_defaults`` the settings its model uses where a request sets
    none (None until it has loaded).
    ``peak_memory_bytes`` is the most memory MLX reported in use by any
    worker of this model configuration (from ``Loaded`` and heartbeats;
    kept after an unload, so the memory budget remembers it).
    ``working_set_bytes`` is the device's recommended working set (0 off
    Metal) and ``memory_limit_bytes`` the worker's MLX memory limit, both
    as the worker reported them in ``Loaded``. ``node`` names the
    ``[[nodes]]`` entry whose machine runs the worker (None: this one);
    ``pid`` is then a pid on that machine. ``vision``: the loaded model
    takes images (None until a worker has loaded it). ``speculation``:
    the drafting the loaded worker runs (``""``: none; None until a worker
    has loaded). ``reasoning``: the reasoning format the loaded worker
    parses (``""``: none, the model cannot think; None until a worker of
    this configuration has loaded, or when its worker did not say).
    ``download``: the
    progress of the pull that ``server.auto_pull`` runs before the worker
    starts (see :func:`gateway.hub.auto_pull.download_report`; None when
    none runs)."""

    state: str = "unloaded"
    pid: int | None = None
    incarnation: int = 0
    restarts: int = 0
    context_length: int | None = None
    load_seconds: float | None = None
    blas: str | None = None
    sampling: str | None = None
    last_error: str | None = None
    memory_bytes: int | None = None
    stats: WorkerStats = field(default_factory=WorkerStats)
    sampling_defaults: SamplingDefaults | None = None
    peak_memory_bytes: int | None = None
    working_set_bytes: int | None = None
    memory_limit_bytes: int | None = None
    node: str | None = None
    vision: bool | None = None
    speculation: str | None = None
    reasoning: str | None = None
    download: dict | None = None

    def loaded(self, message: Loaded) -> None:
        """Take what the worker's ``Loaded`` message reports: its context
        length, load time, backends, sampling defaults, reasoning format,
        working set and
        memory limit, and its MLX memory counts (which seed
        :attr:`stats` until the first heartbeat and the remembered peak)."""
        self.context_length = message.context_length
        self.load_seconds = message.load_seconds
        self.blas = message.blas
        self.sampling = message.sampling
        self.sampling_defaults = message.sampling_defaults
        self.working_set_bytes = message.working_set_bytes
        self.memory_limit_bytes = message.memory_limit_bytes
        self.vision = message.vision
        self.speculation = message.speculation
        self.reasoning = message.reasoning
        self.stats = msgspec.structs.replace(
            self.stats,
            active_memory_bytes=message.active_memory_bytes,
            cache_memory_bytes=message.cache_memory_bytes,
            peak_memory_bytes=message.peak_memory_bytes,
        )
        self.observe_peak(message.peak_memory_bytes)

    def heartbeat(self, stats: WorkerStats) -> None:
        """Take the worker's latest heartbeat ``stats`` (and their peak)."""
        self.stats = stats
        self.observe_peak(stats.peak_memory_bytes)

    def observe_peak(self, peak: int) -> None:
        """Remember the largest MLX peak any worker of this model reported."""
        if peak > (self.peak_memory_bytes or 0):
            self.peak_memory_bytes = peak


def resident_bytes(pid: int | None) -> int | None:
    """Resident set size of local process ``pid`` in bytes; None when
    ``pid`` is None or the process is gone or unreadable. Never raises."""
    if pid is None:
        return None
    try:
        return psutil.Process(pid).memory_info().rss
    except (psutil.Error, OSError):
        return None
