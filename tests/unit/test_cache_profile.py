"""worker.cache_profile: which caches batch, which can be trimmed."""

from __future__ import annotations

import pytest
from mlx_lm.models.cache import ArraysCache, CacheList, ChunkedKVCache, KVCache, QuantizedKVCache, RotatingKVCache

from worker.cache_profile import UnbatchableCacheError, profile_model, require_batchable


class Model:
    """Just enough of an mlx-lm model for ``make_prompt_cache``."""

    def __init__(self, *caches):
        self.caches = caches

    def make_cache(self):
        return [factory() for factory in self.caches]


def test_plain_kv_is_trimmable_and_batchable():
    profile = profile_model(Model(KVCache, KVCache))
    assert profile.kinds == {"KVCache": 2}
    assert profile.trimmable and profile.unbatchable is None
    require_batchable(profile, "m")


@pytest.mark.parametrize(
    "caches",
    [
        (lambda: RotatingKVCache(max_size=16), KVCache),
        (lambda: ArraysCache(size=2), KVCache),
        (lambda: CacheList(ArraysCache(size=2), KVCache()),),
    ],
)
def test_windows_and_state_space_need_checkpoints(caches):
    profile = profile_model(Model(*caches))
    assert not profile.trimmable
    assert profile.unbatchable is None
    assert "checkpoints" in profile.describe()


@pytest.mark.parametrize(
    "factory, reason",
    [
        (lambda: ChunkedKVCache(8), "ChunkedKVCache"),
        (lambda: QuantizedKVCache(), "QuantizedKVCache"),
        (lambda: RotatingKVCache(max_size=16, keep=4), "keep"),
    ],
)
def test_unbatchable_caches_are_refused_with_the_reason(factory, reason):
    profile = profile_model(Model(factory, KVCache))
    assert reason in (profile.unbatchable or "")
    with pytest.raises(UnbatchableCacheError, match=reason):
        require_batchable(profile, "m")
