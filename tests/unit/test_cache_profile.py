"""worker.caches.profile: which caches batch, which can be trimmed."""

from __future__ import annotations

import pytest
from mlx_lm.models.cache import ArraysCache, CacheList, ChunkedKVCache, KVCache, QuantizedKVCache, RotatingKVCache

from worker.caches.profile import pin_untrimmable, profile_model


class Model:
    """Just enough of an mlx-lm model for ``make_prompt_cache``."""

    def __init__(self, *caches):
        self.caches = caches

    def make_cache(self):
        return [factory() for factory in self.caches]


def test_plain_kv_is_trimmable_and_batchable():
    profile = profile_model(Model(KVCache, KVCache))
    assert profile.kinds == {"KVCache": 2}
    assert profile.trimmable and profile.unbatchable is None and not profile.solo


@pytest.mark.parametrize(
    "caches",
    [
        (lambda: RotatingKVCache(max_size=16), KVCache),
        (lambda: ArraysCache(size=2), KVCache),
        (lambda: CacheList(ArraysCache(size=2), KVCache()),),
        (lambda: ChunkedKVCache(8), KVCache),
    ],
)
def test_windows_and_state_space_need_checkpoints(caches):
    profile = profile_model(Model(*caches))
    assert not profile.trimmable
    assert profile.solo == ("ChunkedKVCache" in profile.kinds)
    assert "checkpoints" in profile.describe()


@pytest.mark.parametrize(
    "factory, reason",
    [
        (lambda: ChunkedKVCache(8), "ChunkedKVCache"),
        (lambda: QuantizedKVCache(), "QuantizedKVCache"),
        (lambda: RotatingKVCache(max_size=16, keep=4), "keep"),
    ],
)
def test_unbatchable_caches_run_solo_with_the_reason(factory, reason):
    profile = profile_model(Model(factory, KVCache))
    assert reason in (profile.unbatchable or "")
    assert profile.solo
    assert "one sequence at a time" in profile.describe() and reason in profile.describe()


def test_stored_chunked_layers_are_pinned_against_trimming():
    from mlx_lm.models.cache import can_trim_prompt_cache

    stored = [ChunkedKVCache(8), CacheList(ChunkedKVCache(8), KVCache()), KVCache()]
    assert can_trim_prompt_cache(stored)  # what mlx-lm's class claims
    assert pin_untrimmable(stored) is stored
    assert not can_trim_prompt_cache(stored)
    assert stored[2].is_trimmable()  # plain KV layers keep their own answer
