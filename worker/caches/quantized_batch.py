"""Quantized KV inside the live batch: running sequences keep their plain
attention layers' keys and values quantized (``kv_bits`` 8 or 4).

mlx-lm's ``QuantizedKVCache`` holds one sequence's keys and values as
``mx.quantize`` triples (packed data, scales, biases), and its attention
switches to quantized matrix products for any cache that has ``bits``
(``mlx_lm.models.base.scaled_dot_product_attention``). It has no batched
form, so mlx-lm's ``BatchGenerator`` cannot join it with other sequences.
This module gives it one:

* :class:`QuantizedBatchKVCache` is a ``BatchKVCache`` (mlx-lm's left-padded
  batch cache, whose ``prepare``, ``trim``, ``make_mask``, ``size``,
  ``empty`` and ``state`` it keeps) whose keys and values are quantized
  triples: ``merge`` of per-sequence caches, ``filter``, ``extend``,
  ``extract`` of one row as a mlx-lm ``QuantizedKVCache``, ``finalize``
  (the right-padding roll) and ``update_and_fetch`` work on every array
  of the triples, so a batch row holds exactly what the row's own
  ``QuantizedKVCache`` would hold (the quantization groups run along the
  head dimension: each token's keys are quantized on their own, whether
  fed alone or with others).
* :class:`QuantizedKVRow` is a ``QuantizedKVCache`` with the ``merge`` the
  batch engine calls on a sequence's caches; :func:`as_rows` wraps a
  sequence's quantized layers (sharing the arrays) before it joins a
  batch and :func:`plain_rows` unwraps them, so every state handed out
  (prefix cache, disk tier) is mlx-lm's own class.
* :func:`quantized_prompt_cache` is a model's fresh prompt cache with its
  plain KV layers (``KVCache``) quantized from the first token; sliding
  windows, recurrent and other layers keep their own kinds.
* :func:`why_not_quantized` says why a model's live KV cannot be quantized
  (attention sinks, multi-head latent attention, a head size the group
  size does not divide, a forward pass that fails on quantized KV), so the
  worker falls back to full precision.

Threads: the scheduler thread only (MLX arrays, the model's forward).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx.utils import tree_map
from mlx_lm.models.cache import BatchKVCache, KVCache, QuantizedKVCache, dynamic_roll, make_prompt_cache

__all__ = [
    "QuantizedBatchKVCache",
    "QuantizedKVRow",
    "as_rows",
    "plain_rows",
    "quantized_prompt_cache",
    "why_not_quantized",
]


class QuantizedBatchKVCache(BatchKVCache):
    """A left-padded batch of quantized KV rows (mlx-lm's batch cache
    protocol, as ``BatchKVCache``).

    ``keys`` and ``values`` are None (nothing fed yet) or ``mx.quantize``
    triples ``(data, scales, biases)``, each ``(rows, kv_heads, positions,
    ...)``; ``left_padding``, ``offset`` and the write position ``_idx``
    mean what they mean in ``BatchKVCache``. ``bits`` and ``group_size``
    are the quantization of every row (and make mlx-lm's attention take
    its quantized path). Buffers grow in steps of :attr:`step` positions.
    """

    step = 256

    def __init__(self, left_padding: list[int], group_size: int = 64, bits: int = 8) -> None:
        super().__init__(left_padding)
        self.group_size = group_size
        self.bits = bits

    # -- the forward pass ---------------------------------------------------

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[Any, Any]:
        """Quantize ``keys`` and ``values`` (``(rows, kv_heads, n, dim)``),
        write them at the write position and return every position's
        quantized keys and values so far (triples)."""
        prev, n = self._idx, keys.shape[2]
        if self.keys is None or prev + n > self.keys[0].shape[2]:
            grow = (self.step + n - 1) // self.step * self.step
            new_k = _zeros(keys.shape[:2], grow, keys.shape[3], keys.dtype, self.group_size, self.bits)
            new_v = _zeros(values.shape[:2], grow, values.shape[3], values.dtype, self.group_size, self.bits)
            if self.keys is None:
                self.keys, self.values = new_k, new_v
            else:
                old_k, old_v = self.keys, self.values
                if prev % self.step != 0:
                    old_k, old_v = tree_map(lambda x: x[..., :prev, :], (old_k, old_v))
                self.keys = tuple(mx.concatenate([a, b], axis=2) for a, b in zip(old_k, new_k))
                self.values = tuple(mx.concatenate([a, b], axis=2) for a, b in zip(old_v, new_v))
        self.offset = self.offset + n
        self._idx += n
        packed_k = mx.quantize(keys, group_size=self.group_size, bits=self.bits)
        packed_v = mx.quantize(values, group_size=self.group_size, bits=self.bits)
        for buffer, part in zip(self.keys, packed_k):
            buffer[..., prev : self._idx, :] = part
        for buffer, part in zip(self.values, packed_v):
            buffer[..., prev : self._idx, :] = part
        return self.keys_and_values()

    def keys_and_values(self) -> tuple[Any, Any]:
        """Every position's quantized keys and values up to the write position."""
        return tree_map(lambda x: x[..., : self._idx, :], (self.keys, self.values))

    def finalize(self) -> None:
        """After a right-padded prefill: roll each row's positions right by
        its right padding (every array of the triples), which becomes left
        padding (``BatchKVCache.finalize`` for quantized buffers)."""
        if self._right_padding is not None:
            shift = self._right_padding[:, None]
            self.keys, self.values = tree_map(lambda x: dynamic_roll(x, shift, axis=2), (self.keys, self.values))
            self.offset = self.offset - self._right_padding
            self.left_padding = self.left_padding + self._right_padding
            self._right_padding = None

    # -- batch membership ---------------------------------------------------

    def filter(self, batch_indices: Any) -> None:
        """Keep only rows ``batch_indices`` (in place), then drop the
        leading positions every remaining row pads."""
        if self.keys is not None:
            self.keys, self.values = tree_map(lambda x: x[batch_indices], (self.keys, self.values))
        self.offset = self.offset[batch_indices]
        self.left_padding = self.left_padding[batch_indices]
        shift = min(self.left_padding.tolist())
        if shift > 0:
            if self.keys is not None:
                self.keys, self.values = tree_map(lambda x: x[..., shift:, :], (self.keys, self.values))
            self._idx -= shift
            self.left_padding = self.left_padding - shift

    def extend(self, other: QuantizedBatchKVCache) -> None:
        """Append ``other``'s rows (in place): both batches are padded on
        the left to the later write position and on the right to the
        larger buffer, so every row stays right-justified at ``_idx``.

        Raises:
            ValueError: ``other`` is quantized differently.
        """
        _same_quantization(self, other)
        if self.keys is None and other.keys is None:
            self.left_padding = mx.concatenate([self.left_padding, other.left_padding])
            self.offset = mx.concatenate([self.offset, other.offset])
            return
        template = self if self.keys is not None else other
        top = max(self._idx, other._idx)
        size = max(c.keys[0].shape[2] for c in (self, other) if c.keys is not None)

        def padded(c: QuantizedBatchKVCache) -> tuple[Any, Any, mx.array, mx.array]:
            rows = int(c.offset.shape[0])
            keys, values = c.keys, c.values
            if keys is None:
                keys, values = tree_map(
                    lambda x: mx.zeros((rows, x.shape[1], 0, x.shape[3]), x.dtype), (template.keys, template.values)
                )
            left = top - c._idx
            right = size - keys[0].shape[2] - left
            if right < 0:
                keys, values = tree_map(lambda x: x[..., :right, :], (keys, values))
                right = 0
            if left or right:
                widths = [(0, 0), (0, 0), (left, right), (0, 0)]
                keys, values = tree_map(lambda x: mx.pad(x, widths), (keys, values))
            return keys, values, c.offset, c.left_padding + left

        (k1, v1, o1, p1), (k2, v2, o2, p2) = padded(self), padded(other)
        self.keys = tuple(mx.concatenate([a, b]) for a, b in zip(k1, k2))
        self.values = tuple(mx.concatenate([a, b]) for a, b in zip(v1, v2))
        self.offset = mx.concatenate([o1, o2])
        self.left_padding = mx.concatenate([p1, p2])
        self._idx = top

    def extract(self, idx: int) -> QuantizedKVCache:
        """Row ``idx`` as an independent mlx-lm ``QuantizedKVCache`` holding
        exactly the row's positions (no padding)."""
        cache = QuantizedKVCache(group_size=self.group_size, bits=self.bits)
        if self.keys is None:
            return cache
        start = self.left_padding.tolist()[idx]
        cache.keys, cache.values = tree_map(
            lambda x: mx.contiguous(x[idx : idx + 1, :, start : self._idx]), (self.keys, self.values)
        )
        cache.offset = self._idx - start
        return cache

    @classmethod
    def merge(cls, caches: list[Any]) -> QuantizedBatchKVCache:
        """One batch from per-sequence quantized caches (mlx-lm
        ``QuantizedKVCache`` or :class:`QuantizedKVRow`), each row
        right-justified at the longest row's length.

        Raises:
            ValueError: the caches are quantized differently.
        """
        first = caches[0]
        for c in caches[1:]:
            _same_quantization(first, c)
        lengths = [int(c.offset) if c.keys is not None else 0 for c in caches]
        longest = max(lengths)
        padding = [longest - n for n in lengths]
        batch = cls(padding, group_size=first.group_size, bits=first.bits)
        if longest == 0:
            return batch
        full = next(c for c in caches if c.keys is not None)

        def buffers(parts: tuple[mx.array, ...]) -> tuple[mx.array, ...]:
            return tuple(mx.zeros((len(caches), x.shape[1], longest, x.shape[3]), x.dtype) for x in parts)

        keys, values = buffers(full.keys), buffers(full.values)
        for i, (pad, c) in enumerate(zip(padding, caches)):
            if c.keys is None or lengths[i] == 0:
                continue
            for buffer, part in zip(keys, c.keys):
                buffer[i : i + 1, :, pad:] = part[..., : lengths[i], :]
            for buffer, part in zip(values, c.values):
                buffer[i : i + 1, :, pad:] = part[..., : lengths[i], :]
        batch.keys, batch.values = keys, values
        batch.offset = batch.offset + longest
        batch._idx = longest
        return batch

    # -- accounting ---------------------------------------------------------

    @property
    def meta_state(self) -> tuple[str, str, str]:
        """The write position, group size and bits, as strings (the
        quantization the arrays of :attr:`state` need to be read)."""
        return str(self._idx), str(self.group_size), str(self.bits)

    @property
    def nbytes(self) -> int:
        """Bytes of the quantized buffers (data, scales and biases)."""
        if self.keys is None:
            return 0
        return sum(int(x.nbytes) for x in (*self.keys, *self.values))


class QuantizedKVRow(QuantizedKVCache):
    """One sequence's quantized KV layer on its way into a batch: mlx-lm's
    ``QuantizedKVCache`` with the ``merge`` (into a
    :class:`QuantizedBatchKVCache`) and ``size`` mlx-lm's batch engine
    calls. Made by :func:`as_rows`; never stored (see :func:`plain_rows`)."""

    @classmethod
    def merge(cls, caches: list[Any]) -> QuantizedBatchKVCache:
        """``QuantizedBatchKVCache.merge`` of ``caches``."""
        return QuantizedBatchKVCache.merge(caches)

    def size(self) -> int:
        """Tokens held."""
        return self.offset

    @property
    def nbytes(self) -> int:
        """Bytes of the quantized buffers (0 before the first token)."""
        if self.keys is None:
            return 0
        return sum(int(x.nbytes) for x in (*self.keys, *self.values))


def as_rows(cache: list[Any], bits: int, group_size: int) -> list[Any]:
    """``cache`` (one sequence's layers) ready to join a quantized batch:
    each quantized layer as a :class:`QuantizedKVRow` sharing its arrays,
    each plain KV layer (``KVCache``, empty or not) quantized to ``bits``
    and ``group_size``; other layers unchanged. A plain layer with tokens
    only appears for a state computed before quantization was on; its
    tokens are quantized as they are."""
    out = []
    for layer in cache:
        if isinstance(layer, QuantizedKVCache):
            layer = _recast(layer, QuantizedKVRow)
        elif type(layer) is KVCache:
            row = QuantizedKVRow(group_size=group_size, bits=bits)
            if layer.keys is not None and layer.offset > 0:
                row.keys = mx.quantize(layer.keys[..., : layer.offset, :], group_size=group_size, bits=bits)
                row.values = mx.quantize(layer.values[..., : layer.offset, :], group_size=group_size, bits=bits)
                row.offset = layer.offset
            layer = row
        out.append(layer)
    return out


def plain_rows(cache: list[Any]) -> list[Any]:
    """``cache`` with each :class:`QuantizedKVRow` as mlx-lm's own
    ``QuantizedKVCache`` (sharing its arrays): the form stored in the
    prefix cache and written by the disk tier (which records class names)."""
    out = []
    for layer in cache:
        if isinstance(layer, QuantizedKVRow):
            layer = _recast(layer, QuantizedKVCache)
        out.append(layer)
    return out


def quantized_prompt_cache(model: Any, bits: int, group_size: int, max_kv_size: int | None = None) -> list[Any]:
    """``make_prompt_cache(model, max_kv_size)`` with every plain KV layer
    (``KVCache``) replaced by an empty mlx-lm ``QuantizedKVCache`` of
    ``bits`` and ``group_size``, which quantizes from the first token;
    sliding-window, recurrent, chunked and composite layers keep their
    own kinds."""
    cache = make_prompt_cache(model, max_kv_size)
    return [QuantizedKVCache(group_size=group_size, bits=bits) if type(c) is KVCache else c for c in cache]


def why_not_quantized(model: Any, bits: int, group_size: int) -> str | None:
    """Why ``model``'s live KV cannot be quantized to ``bits`` with
    ``group_size`` (None: it can). Checked in order: no plain KV layer to
    quantize; attention sinks (mlx-lm's quantized attention has none);
    multi-head latent attention (its cache holds a latent vector the
    attention reads directly); a key or value width ``group_size`` does not
    divide (read from a one-token forward pass); and last a short forward
    pass with quantized KV (two prompt tokens, one decode) that must run.
    Runs the model: call on the scheduler thread, at load."""
    if not any(type(c) is KVCache for c in make_prompt_cache(model)):
        return "no plain KV layers"
    modules = model.modules()
    if any(_has(m, "sinks") for m in modules):
        return "attention sinks (mlx-lm's quantized attention has none)"
    if any(_has(m, "kv_lora_rank") for m in modules):
        return "multi-head latent attention (its cache is read outside the attention kernel)"
    plain = make_prompt_cache(model)
    model(mx.array([[0]]), cache=plain)
    widths = {int(x.shape[-1]) for c in plain if type(c) is KVCache and c.keys is not None for x in (c.keys, c.values)}
    odd = sorted(w for w in widths if w % group_size)
    if odd:
        return f"KV width {odd[0]} is not a multiple of kv_group_size {group_size}"
    try:
        cache = quantized_prompt_cache(model, bits, group_size)
        model(mx.array([[0, 1]]), cache=cache)
        mx.eval(model(mx.array([[2]]), cache=cache))
    except Exception as exc:  # any failure means: serve this model in full precision
        return f"a forward pass with quantized KV failed ({type(exc).__name__}: {exc})"
    return None


def _has(module: Any, name: str) -> bool:
    """Whether ``module`` holds a parameter or attribute ``name``."""
    try:
        return name in module or hasattr(module, name)
    except Exception:
        return False


def _recast(layer: QuantizedKVCache, cls: type[QuantizedKVCache]) -> QuantizedKVCache:
    """A ``cls`` holding ``layer``'s quantization, arrays (shared) and offset."""
    out = cls(group_size=layer.group_size, bits=layer.bits)
    out.keys, out.values, out.offset = layer.keys, layer.values, layer.offset
    return out


def _same_quantization(a: Any, b: Any) -> None:
    """Raise ValueError unless caches ``a`` and ``b`` share bits and group size."""
    if (a.bits, a.group_size) != (b.bits, b.group_size):
        raise ValueError(
            f"cannot batch KV quantized to {a.bits} bits / group {a.group_size} "
            f"with {b.bits} bits / group {b.group_size}"
        )


def _zeros(
    lead: tuple[int, ...], length: int, dim: int, dtype: Any, group_size: int, bits: int
) -> tuple[mx.array, ...]:
    """An empty quantized buffer of ``length`` positions for vectors of
    ``dim`` values: packed data (uint32), scales and biases (``dtype``)."""
    per_word = 32 // bits
    shape = (*lead, length)
    return (
        mx.zeros((*shape, dim // per_word), dtype=mx.uint32),
        mx.zeros((*shape, dim // group_size), dtype=dtype),
        mx.zeros((*shape, dim // group_size), dtype=dtype),
    )
