"""The answers of the control routes (:mod:`gateway.control.routes`), as
msgspec Structs (encoded as they are, and rendered in ``/openapi.json``).

Declarative: no I/O, no threads.
"""

from __future__ import annotations

from typing import Literal

import msgspec


class MemoryTier(msgspec.Struct, kw_only=True):
    """The prefix cache's memory tier of one model's worker: ``entries``
    and ``bytes`` held now, ``budget_bytes`` (``prefix_cache_bytes``);
    ``queries`` (look-ups), ``hits`` (look-ups that reused anything, from
    either tier), ``hit_rate`` (hits / queries; 0 before any look-up),
    ``cached_tokens`` (prompt tokens reused) and ``evictions`` (entries
    dropped to stay within the budget), since the worker started."""

    entries: int
    bytes: int
    budget_bytes: int
    queries: int
    hits: int
    hit_rate: float
    cached_tokens: int
    evictions: int


class DiskTier(msgspec.Struct, kw_only=True):
    """The prefix cache's disk tier (``disk_cache_bytes``; all 0 without
    one): ``entries`` and ``bytes`` on disk now; ``hits`` (look-ups served
    from disk), ``hit_rate`` (hits / all look-ups), ``cached_tokens`` (the
    prompt tokens they covered), ``writes`` (entries written), ``rejected``
    (files found broken or foreign and deleted) and ``evictions`` (files
    deleted to stay within the budget), since the worker started."""

    entries: int
    bytes: int
    hits: int
    hit_rate: float
    cached_tokens: int
    writes: int
    rejected: int
    evictions: int


class WarmPrompts(msgspec.Struct, kw_only=True):
    """The model's ``warm_prompts`` prefilled at load: how many and their
    prompt tokens (0 without any)."""

    prompts: int
    tokens: int


class ModelCacheStats(msgspec.Struct, kw_only=True):
    """One model's prefix cache. ``state`` is the model's (``ready``,
    ``unloaded``, ...); ``memory``, ``disk`` and ``warm`` are null when no
    running worker has sent its counters yet (not loaded, or loading)."""

    model: str
    state: str
    memory: MemoryTier | None
    disk: DiskTier | None
    warm: WarmPrompts | None


class CacheStats(msgspec.Struct, kw_only=True):
    """``GET /v1/cache/stats``: every model's (or one model's) cache."""

    object: Literal["cache.stats"] = "cache.stats"
    models: list[ModelCacheStats]


class Dropped(msgspec.Struct, kw_only=True):
    """What a clear dropped from one tier: entries and bytes."""

    entries: int
    bytes: int


class ModelCacheCleared(msgspec.Struct, kw_only=True):
    """One model's clear: ``cleared`` false when its worker was not ready
    (nothing was in memory; its disk tier, if any, stays until the model
    runs again); ``memory`` and ``disk`` what was dropped."""

    model: str
    state: str
    cleared: bool
    memory: Dropped
    disk: Dropped


class CacheCleared(msgspec.Struct, kw_only=True):
    """``DELETE /v1/cache``: every model's (or one model's) clear."""

    object: Literal["cache.cleared"] = "cache.cleared"
    models: list[ModelCacheCleared]


class RequestCancelled(msgspec.Struct, kw_only=True):
    """``POST /v1/requests/{id}/cancel``: the request ``id`` of ``model``
    was ended (its client got one terminal abort)."""

    id: str
    model: str
    object: Literal["request.cancelled"] = "request.cancelled"
