"""The batch engine's caches seen the way a family's mlx-vlm language model expects them, for one call.

mlx-lm's batch engine keeps plain mlx-lm caches (they merge, filter,
extend, and go to the disk tier by class name). Most mlx-vlm language
models run on them as they are. The families in :data:`VIEWED` do not:
their recurrent layers call mlx-vlm's own cache methods, and their
padding logic reads mlx-lm's batch caches differently from what mlx-lm
means. For those, every call of the language model gets each cache
wrapped in a :class:`CacheView` that lives only for that call: the stored
caches stay plain, so nothing else changes.

Scheduler thread only (MLX).
"""

from __future__ import annotations

from typing import Any

VIEWED = {
    "qwen3_5": "its gated-delta layers call mlx-vlm's update_window and update_recurrent, and its own "
    "padding paths misread mlx-lm's batch caches (a one-row batch, right-padded prefills)",
    "qwen3_5_moe": "as qwen3_5 (the same layers, with mixture-of-experts MLPs)",
}
"""mlx-vlm ``model_type`` values whose language model runs on viewed
caches, with why."""


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


def viewed(family: str, caches: list[Any] | None) -> list[Any] | None:
    """``caches`` for one language-model call of a ``family`` model: each
    wrapped in a :class:`CacheView` when the family is in :data:`VIEWED`,
    as they are otherwise."""
    if caches is None or family not in VIEWED:
        return caches
    return [CacheView(cache) for cache in caches]
