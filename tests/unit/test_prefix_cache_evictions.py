"""worker.caches.prefix counts the entries it evicts to stay within its
budget (not those a longer entry of the same prefix replaces, nor a
clear); the eviction itself is mlx-lm's, unchanged."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from worker.caches.prefix import PrefixCache


def kv_state(tokens: int) -> list[KVCache]:
    cache = KVCache()
    keys = mx.random.normal((1, 2, tokens, 16))
    cache.update_and_fetch(keys, keys)
    return [cache]


def test_budget_evictions_are_counted():
    mx.random.seed(0)
    one = kv_state(8)[0].nbytes
    cache = PrefixCache("m", int(one * 2.5))
    for first in (100, 200):
        cache.insert(list(range(first, first + 8)), kv_state(8))
    assert (cache.entries, cache.evictions) == (2, 0)
    cache.insert(list(range(100, 110)), kv_state(10))  # a longer entry of the first prefix replaces it
    assert cache.evictions == 0 and cache.entries == 2
    cache.insert(list(range(300, 308)), kv_state(8))  # no room: the least recently used goes
    assert cache.evictions == 1 and cache.entries == 2 and cache.nbytes <= cache.budget_bytes
    held = cache.nbytes
    assert cache.clear() == (2, held, 0, 0) and cache.entries == 0
    assert cache.evictions == 1  # a clear is not an eviction
    cache.insert(list(range(500, 508)), kv_state(8))
    assert cache.entries == 1 and cache.evictions == 1
