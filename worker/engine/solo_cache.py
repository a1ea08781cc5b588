"""Serving a model whose cache mlx-lm's batch engine cannot join: one
sequence at a time, through the same engine.

mlx-lm's ``BatchGenerator`` joins the caches of the sequences it runs with
each cache class's ``merge`` and later calls ``filter``, ``extend`` and
``extract`` on the joined cache. Chunked attention (``ChunkedKVCache``,
llama4), quantized KV (``QuantizedKVCache``) and a sliding window that keeps
its first tokens (``RotatingKVCache`` with ``keep`` > 0) have no such
operations, so a model using them cannot be batched with other sequences
(:mod:`worker.caches.profile` says why at load). What still works is a batch
of exactly one: the sequence runs on its model's own caches, exactly as
mlx-lm's single-sequence ``generate`` would.

:func:`solo_caches` gives a model's own per-layer caches the four batch
operations for a batch of one (``merge`` of one cache is that cache;
``filter`` keeping that one row is a no-op; ``extract`` of row 0 is an
independent copy of the plain class, so a prefix-cache entry or a
checkpoint never aliases the live state and saves under its own type
name). The engine built with ``solo=True`` (see
:class:`worker.engine.batch_engine.BatchEngine`) wraps every sequence's caches
with it and never holds more than one sequence, so ``extend`` (joining two
sequences) is refused loudly rather than computed wrongly.

Threads: the scheduler thread only (these are MLX caches).
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["SoloBatch", "plain_cache", "solo_caches"]


class SoloBatch:
    """Mixin giving a per-layer cache the batch operations for a batch of
    exactly one sequence. Put in front of the cache's own class by
    :func:`solo_caches`; never instantiated on its own."""

    @classmethod
    def merge(cls, caches: list[Any]) -> Any:
        """The one cache of a batch of one (the batch engine's joining).

        Raises:
            RuntimeError: more than one cache (a second sequence would need
                real batching, which this cache class cannot do).
        """
        if len(caches) != 1:
            raise RuntimeError(f"{cls.__name__}: a batch of {len(caches)} sequences needs batching this cache lacks")
        return caches[0]

    def filter(self, keep: list[int]) -> None:
        """Keep the rows ``keep``: only ``[0]`` (the one row) is possible.

        Raises:
            RuntimeError: any other selection.
        """
        if list(keep) != [0]:
            raise RuntimeError(f"{type(self).__name__}: cannot keep rows {list(keep)} of a batch of one")

    def extend(self, other: Any) -> None:
        """Joining a second sequence: never possible here.

        Raises:
            RuntimeError: always.
        """
        raise RuntimeError(f"{type(self).__name__}: cannot join a second sequence")

    def extract(self, index: int) -> Any:
        """An independent copy of row ``index`` (only 0) as the plain cache
        class, for the prefix cache or a checkpoint.

        Raises:
            RuntimeError: ``index`` is not 0.
        """
        if index != 0:
            raise RuntimeError(f"{type(self).__name__}: no row {index} in a batch of one")
        return plain_cache(copy.deepcopy(self))


_SOLO_CLASSES: dict[type, type] = {}


def _solo_class(cls: type) -> type:
    """The solo subclass of cache class ``cls`` (made once per class)."""
    solo = _SOLO_CLASSES.get(cls)
    if solo is None:
        solo = _SOLO_CLASSES[cls] = type(f"Solo{cls.__name__}", (SoloBatch, cls), {"_plain_class": cls})
    return solo


def solo_caches(caches: list[Any]) -> list[Any]:
    """Give each of a sequence's per-layer ``caches`` (fresh from
    ``make_prompt_cache`` or a private copy from the prefix cache) the batch
    operations of :class:`SoloBatch`, in place; return the same list.

    The objects keep their state and behaviour; only their class gains the
    four methods (a cache that already has them is made solo too, so every
    layer of the sequence follows the same rules).
    """
    for cache in caches:
        if not isinstance(cache, SoloBatch):
            cache.__class__ = _solo_class(type(cache))
    return caches


def plain_cache(cache: Any) -> Any:
    """``cache`` back as its plain cache class (in place; returned), so
    mlx-lm's ``save_prompt_cache`` records the type name it can load."""
    plain = getattr(type(cache), "_plain_class", None)
    if plain is not None:
        cache.__class__ = plain
    return cache
