"""worker.caches.disk.DiskTier on its own: byte budget with least recently
used files out first, the index rebuilt from disk, checks on load."""

from __future__ import annotations

import json

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from worker.caches.disk import MIN_TOKENS, DiskTier


def state(seed: int, tokens: int = MIN_TOKENS) -> list[KVCache]:
    mx.random.seed(seed)
    cache = KVCache()
    keys = mx.random.normal((1, 2, tokens, 16))
    cache.update_and_fetch(keys, keys)
    return [cache]


def prompt(seed: int, tokens: int = MIN_TOKENS) -> list[int]:
    return [seed * 1000 + i for i in range(tokens)]


def written(tier: DiskTier) -> None:
    """Flush the writer thread and start a new one."""
    tier.close()
    tier.start()


def test_budget_evicts_least_recently_used_and_restart_rebuilds_the_index(tmp_path):
    probe = DiskTier(tmp_path / "probe", "m", 1 << 30)
    probe.start()
    assert probe.serialize(prompt(0), state(0))
    written(probe)
    one = probe.nbytes
    probe.close()

    tier = DiskTier(tmp_path, "model-a", int(one * 2.5))
    tier.start()
    for seed in (1, 2):
        assert tier.serialize(prompt(seed), state(seed))
    written(tier)
    assert tier.load(tier.best(prompt(1) + [0], True)[0], prompt(1)) is not None  # 1 is now the most recent
    assert tier.serialize(prompt(3), state(3))
    tier.close()
    assert tier.entries == 2 and tier.nbytes <= tier.budget_bytes
    assert not tier.has(prompt(2)) and tier.has(prompt(1)) and tier.has(prompt(3))

    again = DiskTier(tmp_path, "model-a", int(one * 2.5))
    assert again.entries == 2
    key, usable = again.best(prompt(3) + [5, 6], trimmable=False)
    assert usable == MIN_TOKENS
    loaded = again.load(key, prompt(3))
    assert loaded is not None and mx.array_equal(
        loaded[0].keys[..., :MIN_TOKENS, :], state(3)[0].keys[..., :MIN_TOKENS, :]
    )

    other = DiskTier(tmp_path, "model-b", 1 << 30)
    assert other.entries == 0 and other.directory != again.directory


def test_short_entries_and_bad_files(tmp_path):
    tier = DiskTier(tmp_path, "m", 1 << 30)
    tier.start()
    assert not tier.serialize(prompt(1, MIN_TOKENS - 1), state(1, MIN_TOKENS - 1))
    assert tier.serialize(prompt(2), state(2))
    tier.close()
    key, _ = tier.best(prompt(2) + [1], trimmable=True)
    meta = tier.directory / f"{key}.json"
    data = tier.directory / f"{key}.safetensors"
    raw = bytearray(data.read_bytes())
    raw[-5] ^= 0xFF  # one flipped byte in the tensor data
    data.write_bytes(bytes(raw))
    assert tier.load(key, prompt(2)) is None
    assert tier.stats.rejected == 1 and not meta.exists() and not data.exists()

    (tier.directory / "garbage.json").write_text(json.dumps({"tokens": [1, 2]}))
    (tier.directory / "orphan.safetensors").write_bytes(b"half a write")
    (tier.directory / "x.safetensors.tmp").write_bytes(b"interrupted")
    assert DiskTier(tmp_path, "m", 1 << 30).entries == 0
    assert list(tier.directory.iterdir()) == []


def test_clear_deletes_every_entry_and_drops_writes_queued_before_it(tmp_path):
    tier = DiskTier(tmp_path, "model-a", 1 << 30)
    tier.start()
    assert tier.serialize(prompt(1), state(1))
    written(tier)
    tier.close()  # the writer stopped: the next entry stays queued
    assert tier.serialize(prompt(2), state(2))
    entries, nbytes = tier.clear()
    assert (entries, tier.entries, tier.nbytes) == (1, 0, 0) and nbytes > 0
    tier.start()  # the write queued before the clear now runs, and is dropped
    written(tier)
    tier.close()
    assert tier.entries == 0 and not list(tier.directory.iterdir())
    assert tier.serialize(prompt(3), state(3))  # entries made after the clear are kept
    tier.start()
    written(tier)
    tier.close()
    assert tier.entries == 1 and tier.has(prompt(3))
