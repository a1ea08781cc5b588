"""What kind of per-layer cache a model keeps, and what that allows.

mlx-lm models build their own caches (``make_prompt_cache``): plain KV
(``KVCache``, also used by MLA models), sliding-window KV
(``RotatingKVCache``), linear-attention or state-space state
(``ArraysCache``), pairs of them (``CacheList``), chunked attention
(``ChunkedKVCache``), quantized KV (``QuantizedKVCache``). They differ in
two ways that matter for serving:

* batching: mlx-lm's ``BatchGenerator`` joins caches of different
  sequences with the cache class's ``merge``; a class without one (chunked,
  and mlx-lm's own quantized cache, which mlxd batches only through
  :mod:`worker.caches.quantized_batch` when ``kv_bits`` is set) or a
  rotating cache that keeps its first tokens (``keep`` > 0) cannot join a
  batch. Such a model is served one sequence at a time
  through the same engine (:mod:`worker.engine.solo_cache`), never refused and
  never batched wrongly;
* trimming: a KV cache can be cut back to any shorter prefix, so one
  stored entry serves every prompt that shares part of it; a state-space
  state, a sliding window that has already wrapped, or a chunked-attention
  cache that has dropped its front (it says it can be trimmed, but the
  tokens it dropped do not come back) cannot, so reuse needs a snapshot
  taken exactly where a later prompt continues (see
  :mod:`worker.engine.scheduler`'s prompt-end checkpoints).

:func:`profile_model` inspects a fresh cache once at load;
:func:`pin_untrimmable` keeps a stored chunked cache from being cut back;
:func:`held_tokens` reads how many tokens a sequence's cache has consumed.
Pure Python over mlx-lm objects; call them on the scheduler thread (they
build or touch caches).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

_UNTRIMMABLE_KINDS = frozenset(("RotatingKVCache", "ChunkedKVCache"))
"""Cache classes whose stored states cannot be cut back to any prefix
(a wrapped window; a chunked cache past its first chunk)."""


@dataclass(frozen=True)
class CacheProfile:
    """The cache layout of one model.

    ``kinds`` counts the layers per cache class name (``CacheList`` is
    counted by its members); ``trimmable``: every layer's cache can be cut
    back to a shorter prefix (so prefix reuse needs no checkpoints);
    ``unbatchable``: why the batch engine cannot join it with other
    sequences (None: it can); the model is then served one sequence at a
    time (:attr:`solo`).
    """

    kinds: dict[str, int]
    trimmable: bool
    unbatchable: str | None

    @property
    def solo(self) -> bool:
        """Whether the model must run one sequence at a time."""
        return self.unbatchable is not None

    def describe(self) -> str:
        """One log line: the layer kinds, how prefixes are reused and, for a
        model that cannot be batched, why it runs one sequence at a time."""
        layers = ", ".join(f"{n}x {k}" for k, n in sorted(self.kinds.items()))
        reuse = "trim any cached prefix" if self.trimmable else "prompt-end and message-boundary checkpoints"
        line = f"cache layers: {layers}; prefix reuse: {reuse}"
        if self.unbatchable:
            line += f"; batching: none, one sequence at a time ({self.unbatchable})"
        return line


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
    # a fresh rotating or chunked cache is trimmable until it wraps or
    # drops its front: judge by class
    trimmable = can_trim_prompt_cache(cache) and not _UNTRIMMABLE_KINDS & kinds.keys()
    reason = next((r for r in map(_why_unbatchable, cache) if r), None)
    return CacheProfile(dict(kinds), trimmable, reason)


def _never_trimmable() -> bool:
    """``is_trimmable`` of a pinned cache layer."""
    return False


def pin_untrimmable(cache: list[Any]) -> list[Any]:
    """Make each chunked-attention layer of ``cache`` (a stored prefix state)
    report that it cannot be trimmed, in place; return ``cache``.

    mlx-lm's ``ChunkedKVCache`` always says it can be trimmed, but once it
    has dropped its front, cutting it back leaves out tokens a later prompt
    attends to; the prefix cache's lookup would then trim a longer entry
    and give a wrong state. Pinned layers make the lookup use only entries
    that end exactly where a prompt continues (the checkpoints).
    """
    for layer in cache:
        for leaf in _leaves(layer):
            if type(leaf).__name__ == "ChunkedKVCache":
                leaf.is_trimmable = _never_trimmable
    return cache


def held_tokens(cache: list[Any]) -> int | None:
    """How many tokens one sequence's ``cache`` has consumed, as its layers
    that count them say (every KV kind keeps an ``offset``: the tokens
    fed, also past a sliding window's wrap); None when no layer counts
    (state-space layers only), -1 when the layers disagree.

    A state stored under a token prefix must hold exactly that many
    tokens; this is the check (see :meth:`worker.caches.prefix.PrefixCache.insert`).
    """
    counts = {
        leaf.offset for layer in cache for leaf in _leaves(layer) if isinstance(getattr(leaf, "offset", None), int)
    }
    if not counts:
        return None
    return counts.pop() if len(counts) == 1 else -1
