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


def test_fit_gives_back_what_it_evicts_also_before_the_disk_tier_has_it(tmp_path):
    """``fit`` (a KV budget's room for the prefix cache) evicts down to the
    room, and an evicted entry still queued for the disk tier is let go
    too: MLX's memory in use comes back down."""
    from worker.caches.disk import DiskTier

    mx.random.seed(0)
    cache = PrefixCache("m", 1 << 30, disk=DiskTier(tmp_path, "m", 1 << 30))
    mx.clear_cache()
    before = mx.get_active_memory()
    for first in range(4):
        cache.insert([first, *range(1000, 1999)], kv_state(1000))
    held = mx.get_active_memory() - before
    assert held >= 4 * kv_state(1000)[0].nbytes
    one = cache.nbytes // 4
    cache.fit(one)
    assert cache.entries == 1 and cache.nbytes == one and len(cache._unspilled) == 1
    mx.clear_cache()
    assert mx.get_active_memory() - before <= held // 4 + (1 << 20)
    cache.fit(0)
    assert cache.entries == 0 and not cache._unspilled
    cache.disk.close()
