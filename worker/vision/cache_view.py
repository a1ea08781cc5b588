"""The batch engine's caches seen the way a family's mlx-vlm language model expects them, for one call.

mlx-lm's batch engine keeps plain mlx-lm caches (they merge, filter,
extend, and go to the disk tier by class name). Most mlx-vlm language
models run on them as they are. The families in :data:`VIEWED` do not,
and every call of their language model gets each cache wrapped in a view
of the family's kind that lives only for that call: the stored caches
stay plain, so nothing else changes.

* :class:`CacheView` (Qwen3.5): their recurrent layers call mlx-vlm's own
  cache methods, and their padding logic reads mlx-lm's batch caches
  differently from what mlx-lm means.
* :class:`SharedKVView` (Gemma 3n): their last layers attend with the keys
  and values of an earlier layer, read from its cache's ``state``, which
  for mlx-lm's batch caches is the whole preallocated buffer, not what
  that layer attended to; and at that layer's position after the call's
  tokens were added (mlx-vlm 0.7.10 rotates those layers' queries that
  many positions too far; the model's reference implementation and
  mlx-lm's own Gemma 3n use the call's one position).

Scheduler thread only (MLX).
"""

from __future__ import annotations

from typing import Any


class CacheView:
    """One engine cache, for one language-model call, as mlx-vlm's recurrent
    layers use it.

    Reads, methods and item access go to the cache; attribute writes stay
    on the view (mlx-vlm memoizes batch metadata on its caches, which must
    not outlive the call). ``left_padding`` reads as None, so the model
    does not take its own padded-batch paths (which swap in mlx-vlm cache
    classes and drop mlx-lm's prefill lengths); the cache's own
    ``make_mask`` still combines its real padding and lengths, and mlx-lm
    gives a recurrent cache no left padding other than zero.
    """

    left_padding = None

    def __init__(self, cache: Any) -> None:
        object.__setattr__(self, "_cache", cache)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cache, name)

    def __getitem__(self, index: int) -> Any:
        return self._cache[index]

    def __setitem__(self, index: int, value: Any) -> None:
        self._cache[index] = value

    def update_window(self, index: int, source: Any, width: int, *, lengths: Any = None) -> Any:
        """Keep the last ``width`` positions of ``source`` (rows x time x
        channels) as state ``index``, each row's ending at its own length
        when ``lengths`` is given (right-padded rows); return the state."""
        import mlx.core as mx

        length = source.shape[1] - width
        if lengths is None:
            state = mx.contiguous(source[:, length:])
        else:
            positions = (mx.clip(lengths, 0, length)[:, None] + mx.arange(width))[..., None]
            state = mx.take_along_axis(source, positions, axis=1)
        self._cache[index] = state
        return state

    def update_recurrent(self, index: int, length: int, update: Any) -> tuple[Any, Any]:
        """Run ``update(state, None)`` from state ``index`` and keep the final
        state (no intermediate history: mlxd never rolls a recurrent state
        back); return the output and that state."""
        output, state = update(self._cache[index], None)[:2]
        self._cache[index] = state
        return output, state


class SharedKVView:
    """One engine cache, for one language-model call, as a model whose
    later layers share an earlier layer's keys and values reads it (see
    the module docstring).

    Everything goes to the cache, except: after :meth:`update_and_fetch`
    in this call, ``state`` is the keys and values it returned (what the
    owning layer attended to, in the layout its mask was made for) and
    ``offset`` the cache's offset before it (the position of the call's
    first token).
    """

    def __init__(self, cache: Any) -> None:
        object.__setattr__(self, "_cache", cache)
        object.__setattr__(self, "_fetched", None)
        object.__setattr__(self, "_before", None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cache, name)

    def update_and_fetch(self, keys: Any, values: Any) -> Any:
        """The cache's ``update_and_fetch``, remembered for the call."""
        import mlx.core as mx

        before = self._cache.offset
        object.__setattr__(self, "_before", mx.array(before) if isinstance(before, mx.array) else before)
        fetched = self._cache.update_and_fetch(keys, values)
        object.__setattr__(self, "_fetched", fetched)
        return fetched

    @property
    def state(self) -> Any:
        """This call's fetched keys and values once the owning layer ran,
        else the cache's state."""
        return self._fetched if self._fetched is not None else self._cache.state

    @property
    def offset(self) -> Any:
        """The offset before this call's tokens once the owning layer ran,
        else the cache's."""
        return self._before if self._before is not None else self._cache.offset


VIEWED: dict[str, tuple[type, str]] = {
    "qwen3_5": (
        CacheView,
        "its gated-delta layers call mlx-vlm's update_window and update_recurrent, and its own "
        "padding paths misread mlx-lm's batch caches (a one-row batch, right-padded prefills)",
    ),
    "qwen3_5_moe": (CacheView, "as qwen3_5 (the same layers, with mixture-of-experts MLPs)"),
    "gemma3n": (
        SharedKVView,
        "its KV-shared layers read an earlier layer's cache state (the whole preallocated buffer of a "
        "batch cache) at that cache's offset after this call's tokens",
    ),
}
"""mlx-vlm ``model_type`` values whose language model runs on viewed
caches: the view class and why."""


def viewed(family: str, caches: list[Any] | None) -> list[Any] | None:
    """``caches`` for one language-model call of a ``family`` model: each
    wrapped in its view class when the family is in :data:`VIEWED`, as
    they are otherwise."""
    if caches is None or family not in VIEWED:
        return caches
    view = VIEWED[family][0]
    return [view(cache) for cache in caches]
