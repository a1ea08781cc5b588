"""What kind of per-layer cache a model keeps, and what that allows.

mlx-lm models build their own caches (``make_prompt_cache``): plain KV
(``KVCache``, also used by MLA models), sliding-window KV
(``RotatingKVCache``), linear-attention or state-space state
(``ArraysCache``), pairs of them (``CacheList``), chunked attention
(``ChunkedKVCache``), quantized KV (``QuantizedKVCache``). They differ in
two ways that matter for serving:

* batching: mlx-lm's ``BatchGenerator`` joins caches of different
  sequences with the cache class's ``merge``; a class without one (chunked,
  quantized) or a rotating cache that keeps its first tokens (``keep`` > 0)
  cannot join a batch;
* trimming: a KV cache can be cut back to any shorter prefix, so one
  stored entry serves every prompt that shares part of it; a state-space
  state, or a sliding window that has already wrapped, cannot, so reuse
  needs a snapshot taken exactly where a later prompt continues (see
  :mod:`worker.scheduler`'s prompt-end checkpoints).

:func:`profile_model` inspects a fresh cache once at load. Pure Python
over mlx-lm objects; call it on the scheduler thread (it builds caches).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any


class UnbatchableCacheError(RuntimeError):
    """The model's cache cannot join mlx-lm's batch engine; the message
    names the cache type and why."""


@dataclass(frozen=True)
class CacheProfile:
    """The cache layout of one model.

    ``kinds`` counts the layers per cache class name (``CacheList`` is
    counted by its members); ``trimmable``: every layer's cache can be cut
    back to a shorter prefix (so prefix reuse needs no checkpoints);
    ``unbatchable``: why the batch engine cannot take it (None: it can).
    """

    kinds: dict[str, int]
    trimmable: bool
    unbatchable: str | None

    def describe(self) -> str:
        """One log line: the layer kinds and how prefixes are reused."""
        layers = ", ".join(f"{n}x {k}" for k, n in sorted(self.kinds.items()))
        reuse = "trim any cached prefix" if self.trimmable else "prompt-end and message-boundary checkpoints"
        return f"cache layers: {layers}; prefix reuse: {reuse}"


def _leaves(cache: Any) -> list[Any]:
    """The per-layer caches inside ``cache`` (``CacheList`` unpacked)."""
    inner = getattr(cache, "caches", None)
    if type(cache).__name__ == "CacheList" and inner is not None:
        return [leaf for c in inner for leaf in _leaves(c)]
    return [cache]


def _why_unbatchable(cache: Any) -> str | None:
    """Why one layer's cache cannot join a batch (None: it can)."""
    name = type(cache).__name__
    if name == "CacheList":
        return next((r for r in map(_why_unbatchable, cache.caches) if r), None)
    if not hasattr(cache, "merge"):
        return f"{name} has no batched form in mlx-lm"
    if name == "RotatingKVCache" and getattr(cache, "keep", 0) > 0:
        return "RotatingKVCache with keep > 0 cannot be batched by mlx-lm"
    return None


def profile_model(model: Any) -> CacheProfile:
    """Build one fresh cache for ``model`` and describe it.

    Raises whatever ``make_prompt_cache`` raises for a broken model.
    """
    from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache

    cache = make_prompt_cache(model)
    kinds = Counter(type(leaf).__name__ for c in cache for leaf in _leaves(c))
    # a fresh rotating cache is trimmable until it wraps: judge by class
    trimmable = can_trim_prompt_cache(cache) and "RotatingKVCache" not in kinds
    reason = next((r for r in map(_why_unbatchable, cache) if r), None)
    return CacheProfile(dict(kinds), trimmable, reason)


def require_batchable(profile: CacheProfile, model_name: str) -> None:
    """Raise :class:`UnbatchableCacheError` when ``profile`` cannot be
    served by the batch engine (mlxd serves every model through it: a
    model that would need a different engine is refused at load, with the
    reason, rather than served wrongly)."""
    if profile.unbatchable:
        raise UnbatchableCacheError(
            f"model {model_name}: {profile.unbatchable}; mlxd's continuous batching cannot serve it"
        )
