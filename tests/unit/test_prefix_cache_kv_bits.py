"""worker.caches.prefix with ``kv_bits``: entries are kept quantized and
handed out as plain KV layers the batch engine can merge."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.cache import ArraysCache, KVCache

from worker.caches.prefix import PrefixCache


def kv_layer(tokens: int, width: int) -> KVCache:
    cache = KVCache()
    keys = mx.random.normal((1, 2, tokens, width))
    cache.update_and_fetch(keys, keys * 0.5)
    return cache


@pytest.mark.parametrize("bits", [4, 8])
def test_entries_shrink_and_come_back_as_plain_kv(bits):
    mx.random.seed(0)
    tokens = list(range(100, 164))
    state = ArraysCache(size=1)
    state[0] = mx.ones((1, 4, 8))
    packed = PrefixCache("m", 1 << 30, kv_bits=bits, kv_group_size=32)
    original = kv_layer(64, 64)
    reference = original.keys[..., :64, :]
    packed.insert(tokens, [original, state])
    float32_kv = 2 * (2 * 64 * 64 * 4)  # keys and values of 64 tokens
    assert packed.nbytes - state.nbytes < float32_kv * (0.2 if bits == 4 else 0.35)

    found = packed.fetch(tokens + [7])
    assert found.cached == 64 and found.remaining == [7]
    layer, other = found.cache
    assert type(layer) is KVCache and hasattr(KVCache, "merge")
    assert layer.offset == 64
    error = mx.abs(layer.keys - reference).max().item()
    assert 0 < error < (0.5 if bits == 4 else 0.05)
    assert isinstance(other, ArraysCache)


def test_widths_the_group_does_not_divide_stay_plain():
    packed = PrefixCache("m", 1 << 30, kv_bits=4, kv_group_size=64)
    tokens = list(range(10, 30))
    packed.insert(tokens, [kv_layer(20, 40)])
    found = packed.fetch(tokens + [1])
    assert type(found.cache[0]) is KVCache and found.cached == 20
