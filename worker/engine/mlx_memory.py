"""MLX's own memory accounting and limits for this worker.

macOS does not show Metal buffers reliably in a process's resident set, so
the worker reports what MLX itself counts (buffers in use, freed buffers it
keeps cached for reuse, the peak) and the device's recommended working set,
and applies the memory and cache limits the gateway derived from its
memory budget. On the CPU backend the same calls count host memory.

Every function here calls MLX, so it runs on the scheduler thread only
(the thread that loads the model and runs the engine).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MemorySample:
    """MLX's counters at one moment, in bytes: ``active`` (buffers in use),
    ``cache`` (freed buffers kept for reuse) and ``peak`` (the most ever in
    use by this process)."""

    active: int
    cache: int
    peak: int


def sample() -> MemorySample:
    """Read MLX's memory counters (scheduler thread only)."""
    import mlx.core as mx

    return MemorySample(active=mx.get_active_memory(), cache=mx.get_cache_memory(), peak=mx.get_peak_memory())


def record(counters: Any) -> None:
    """Write MLX's memory counters into a scheduler's ``counters`` (its
    ``active_memory``, ``cache_memory`` and ``peak_memory``, which the
    heartbeats report); scheduler thread only."""
    memory = sample()
    counters.active_memory = memory.active
    counters.cache_memory = memory.cache
    counters.peak_memory = memory.peak


def memory_limit() -> int:
    """MLX's memory limit in effect, in bytes (scheduler thread only)."""
    import mlx.core as mx

    return int(mx.get_memory_limit())


def working_set_bytes() -> int:
    """The default device's ``max_recommended_working_set_size`` (how much
    memory Metal recommends a process keep resident on the GPU); 0 when the
    device reports none, as on the CPU backend. Scheduler thread only."""
    import mlx.core as mx

    info_of = getattr(mx, "device_info", None) or getattr(getattr(mx, "metal", None), "device_info", None)
    if info_of is None:
        return 0
    try:
        info = info_of()
    except Exception:  # no such device information on this backend
        return 0
    value = info.get("max_recommended_working_set_size", 0)
    return int(value) if isinstance(value, int) else 0


def apply_limits(memory_limit: int, cache_limit: int | None) -> None:
    """Set MLX's memory limit (0: keep MLX's default) and the limit of its
    buffer cache (None: keep the default, which is the memory limit; 0
    disables the cache). MLX treats the memory limit as a guideline: past
    it, it frees its cache and waits for pending work before allocating
    more, and fails only when the system is really out of memory.
    Scheduler thread only."""
    import mlx.core as mx

    if memory_limit > 0:
        mx.set_memory_limit(memory_limit)
    if cache_limit is not None and cache_limit >= 0:
        mx.set_cache_limit(cache_limit)


def clear_cache() -> None:
    """Return MLX's cached free buffers to the system (scheduler thread
    only; buffers in use, such as the prefix cache's, are untouched)."""
    import mlx.core as mx

    mx.clear_cache()
