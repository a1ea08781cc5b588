"""Cutting a batch's caches back to what each row kept after verification.

A speculative step (:mod:`worker.speculation.step`) feeds every row
``width`` positions (its pending token, its draft, padding) and then keeps
a different number of them per row. :func:`rollback_for` picks how the
batch's caches get back to exactly the kept tokens:

* :class:`TrimRows` when every layer can be cut back: a batch of one whose
  caches are all trimmable, or a batch whose every layer is a plain
  ``BatchKVCache`` (or a subclass of it: the quantized live batch of
  :mod:`worker.caches.quantized_batch`). The whole batch is trimmed by the smallest count; a row
  with more to drop is shifted right inside the cache buffer, its left
  padding growing by as much (mlx-lm's own right-padding
  ``prepare``/``finalize``), so the dropped positions fall past the write
  position and the row's attention mask hides what wrapped in at its left.
* :class:`ReplayKept` when the batch mixes ``BatchKVCache`` layers with
  recurrent state (``ArraysCache``: the linear-attention and state-space
  layers of hybrid families), which cannot be trimmed: the recurrent
  states are saved before the forward pass (their arrays are replaced,
  never written in place, so keeping the references is the snapshot),
  restored afterwards, the attention layers trimmed by the whole width,
  and the kept tokens fed again, right-padded with per-row lengths exactly
  as mlx-lm prefills prompts of different lengths. That costs a second,
  narrower forward pass per speculative step.

Any other cache (sliding windows, chunked attention) gets None: the
worker turns speculation off for such models at load
(:func:`worker.model_setup.speculation_for`), and a batch that still has
one decodes without drafting.

Threads: the scheduler thread only (MLX caches, the model's forward).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, BatchKVCache


def leaves(layer: Any) -> list[Any]:
    """The caches inside one layer's cache (``CacheList`` unpacked)."""
    inner = getattr(layer, "caches", None)
    if type(layer).__name__ == "CacheList" and inner is not None:
        return [leaf for c in inner for leaf in leaves(c)]
    return [layer]


class Rollback:
    """How one speculative step's caches are cut back (see the module
    docstring); :meth:`save` runs before the verification forward pass,
    :meth:`restore` after the rows' kept counts are known."""

    def save(self, cache: list[Any]) -> None:
        """Remember what :meth:`restore` needs of ``cache``."""

    def restore(self, model: Any, cache: list[Any], width: int, kept: list[list[int]]) -> None:
        """Leave row ``i`` of ``cache`` holding what it held before the
        forward pass of ``width`` positions plus the tokens ``kept[i]``
        (a prefix of what row ``i`` was fed, at least one token)."""
        raise NotImplementedError


class TrimRows(Rollback):
    """Cut each row back by the positions it did not keep."""

    def restore(self, model: Any, cache: list[Any], width: int, kept: list[list[int]]) -> None:
        """Trim row ``i`` by ``width - len(kept[i])`` positions."""
        counts = [width - len(k) for k in kept]
        low = min(counts)
        extra = [c - low for c in counts]
        for layer in cache:
            for leaf in leaves(layer):
                if low:
                    leaf.trim(low)
                if any(extra):
                    leaf.prepare(right_padding=extra)
                    leaf.finalize()


class ReplayKept(Rollback):
    """Restore the recurrent states and feed the kept tokens again."""

    def __init__(self) -> None:
        self._saved: list[tuple[ArraysCache, tuple[list[Any], Any, Any]]] = []

    def save(self, cache: list[Any]) -> None:
        """Keep references to every ``ArraysCache`` layer's arrays."""
        self._saved = [
            (leaf, (list(leaf.cache), leaf.left_padding, leaf.lengths))
            for layer in cache
            for leaf in leaves(layer)
            if isinstance(leaf, ArraysCache)
        ]

    def restore(self, model: Any, cache: list[Any], width: int, kept: list[list[int]]) -> None:
        """Put the saved states back, trim the attention layers by
        ``width``, then run ``kept`` through ``model`` (right-padded, with
        per-row lengths when the rows kept different numbers)."""
        for leaf, (arrays, left_padding, lengths) in self._saved:
            leaf.cache, leaf.left_padding, leaf.lengths = arrays, left_padding, lengths
        self._saved = []
        every = [leaf for layer in cache for leaf in leaves(layer)]
        for leaf in every:
            if isinstance(leaf, BatchKVCache):
                leaf.trim(width)
        lengths = [len(k) for k in kept]
        top = max(lengths)
        padding = [top - n for n in lengths]
        if any(padding):
            for leaf in every:
                leaf.prepare(lengths=lengths, right_padding=padding)
        model(mx.array([k + [k[-1]] * (top - len(k)) for k in kept], dtype=mx.uint32), cache=cache)
        if any(padding):
            for leaf in every:
                leaf.finalize()


def rollback_for(cache: list[Any], rows: int) -> Rollback | None:
    """The :class:`Rollback` for ``cache`` (a batch of ``rows``
    sequences), or None when neither applies."""
    every = [leaf for layer in cache for leaf in leaves(layer)]
    if rows == 1 and all(leaf.is_trimmable() for leaf in every):
        return TrimRows()
    kinds = {type(leaf) for leaf in every}
    attention = {k for k in kinds if issubclass(k, BatchKVCache)}
    if attention and kinds == attention:
        return TrimRows()
    if kinds - attention <= {ArraysCache}:
        return ReplayKept()
    return None
