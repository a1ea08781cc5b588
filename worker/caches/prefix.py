"""The prefix cache: KV state of earlier sequences, reused by prompts that
start with the same tokens.

A thin layer over mlx-lm's ``LRUPromptCache`` (a token trie with LRU
eviction under a byte budget) that adds what the scheduler needs: entries
keyed by the model's identity, a lookup that always leaves at least one
prompt token to feed, forced evaluation of inserted state (so no entry keeps
a whole batch's buffers alive through a lazy slice), stored chunked-attention
states pinned against trimming (:func:`worker.caches.profile.pin_untrimmable`),
and hit statistics.

Scheduler thread only: every method evaluates or copies MLX arrays.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import LRUPromptCache, can_trim_prompt_cache, trim_prompt_cache

from worker.caches.profile import held_tokens, pin_untrimmable

MAX_ENTRIES = 4096
"""Upper bound on cached sequences, whatever their size."""

MAX_UNSPILLED = 16
"""Most entries waiting to be written to the disk tier (oldest dropped)."""

log = logging.getLogger("mlxd.worker.prefix_cache")


@dataclass
class Lookup:
    """The result of :meth:`PrefixCache.fetch`.

    ``cache`` is a private copy covering ``prompt[:cached]`` (None when
    nothing was reused) and ``remaining`` the prompt tokens still to feed,
    never empty. ``from_disk``: ``cached`` came from the disk tier (then
    equal to ``cached``; 0 for a memory hit).
    """

    cache: list[Any] | None
    cached: int
    remaining: list[int]
    from_disk: int = 0


class PrefixCache:
    """Reusable KV state of ``model_key``'s sequences, at most
    ``budget_bytes`` in total (entries are evicted least recently used
    first; an entry larger than the budget is not kept).

    ``disk``: an optional :class:`~worker.caches.disk.DiskTier` behind the
    memory: inserted entries are queued for it (:meth:`spill` writes them
    when the scheduler has time), and a lookup that finds a longer prefix
    there than in memory loads it. ``trimmable``: the model's cache can be
    cut back (see :mod:`worker.caches.profile`). ``kv_bits`` (4 or 8; 0:
    off) and ``kv_group_size``: entries keep their plain KV layers
    quantized (about 4x / 2x smaller in float16, more in float32); layers
    of other kinds (sliding window, state-space) and KV widths the group
    size does not divide stay as they are. ``live_quantized``: the running
    sequences keep quantized KV too (see
    :mod:`worker.caches.quantized_batch`), so the states stored are already
    quantized and are handed out as stored, never converted back: a hit
    continues exactly as the cold run that stored it. Without it (a model
    whose live KV stays in full precision) entries are dequantized when
    handed out, and a hit continues from rounded KV, so its output may
    differ from a cold run's.
    """

    def __init__(
        self,
        model_key: str,
        budget_bytes: int,
        disk: Any = None,
        trimmable: bool = True,
        kv_bits: int = 0,
        kv_group_size: int = 64,
        live_quantized: bool = False,
    ) -> None:
        self.model_key = model_key
        self.live_quantized = live_quantized
        self.kv_bits = kv_bits
        self.kv_group_size = kv_group_size
        self.budget_bytes = budget_bytes
        self.disk = disk
        self.trimmable = trimmable
        self._unspilled: dict[tuple[int, ...], list[Any]] = {}
        self._lru = _CountingLRU(max_size=MAX_ENTRIES, max_bytes=budget_bytes)
        self.queries = 0
        self.hits = 0
        self.reused_tokens = 0
        self.refused = 0

    @property
    def nbytes(self) -> int:
        """Bytes of KV state held now (never above the budget)."""
        return self._lru.nbytes

    @property
    def evictions(self) -> int:
        """Entries evicted (least recently used first) to stay within the
        budget and :data:`MAX_ENTRIES`; not those a longer entry of the
        same prefix replaced, nor a :meth:`clear`."""
        return self._lru.evictions

    @property
    def entries(self) -> int:
        """Number of cached sequences."""
        return len(self._lru)

    def fetch(self, prompt: list[int]) -> Lookup:
        """Return the longest reusable prefix state for ``prompt`` (non-empty).

        The engine needs at least one token to feed, so an exact hit gives
        its last token back: a trimmable state is cut by one token; a state
        that cannot be trimmed (state-space layers, a wrapped sliding
        window) is only usable when it ends exactly where the rest of the
        prompt starts, so the lookup is repeated for ``prompt[:-1]`` (the
        scheduler's prompt-end checkpoints are stored there, so an exact
        repeat reuses all but the last token whatever the cache).
        """
        self.queries += 1
        cache, remaining = self._lru.fetch_nearest_cache(self.model_key, prompt)
        if cache is not None and not remaining:
            if can_trim_prompt_cache(cache):
                trim_prompt_cache(cache, 1)
                remaining = prompt[-1:]
            elif len(prompt) < 2:
                cache = None
            else:
                cache, remaining = self._lru.fetch_nearest_cache(self.model_key, prompt[:-1])
                remaining = list(remaining) + prompt[-1:]
        cached = len(prompt) - len(remaining) if cache is not None else 0
        from_disk = 0
        if self.disk is not None:
            found = self._from_disk(prompt, cached)
            if found is not None:
                cache, cached = found
                remaining, from_disk = prompt[cached:], cached
        if cache is None or cached <= 0:
            return Lookup(None, 0, list(prompt))
        if not self.live_quantized:
            cache = _dequantized(cache)
        self.hits += 1
        self.reused_tokens += cached
        return Lookup(cache, cached, list(remaining), from_disk)

    def _from_disk(self, prompt: list[int], cached: int) -> tuple[list[Any], int] | None:
        """A state from the disk tier covering more of ``prompt`` than the
        ``cached`` tokens memory had (kept in memory too), or None."""
        best = self.disk.best(prompt, self.trimmable)
        if best is None or best[1] <= cached:
            return None
        key, usable = best
        with self.disk._lock:
            entry = self.disk._index.get(key)
        if entry is None:
            return None
        tokens = entry.tokens.tolist()
        cache = self.disk.load(key, tokens)
        if cache is None:
            return None
        pin_untrimmable(cache)
        mx.eval([c.state for c in cache])
        self._lru.insert_cache(self.model_key, tokens, copy.deepcopy(cache))
        if len(tokens) > usable:
            trim_prompt_cache(cache, len(tokens) - usable)
        self.disk.stats.hits += 1
        self.disk.stats.hit_tokens += usable
        log.info("prefix of %d tokens loaded from the disk cache", usable)
        return cache, usable

    def spill(self, limit: int | None = None) -> int:
        """Serialize up to ``limit`` (None: all) entries inserted since the
        last call for the disk tier's writer; return how many were handed
        over. Call when the engine has time (it copies each state)."""
        done = 0
        while self._unspilled and (limit is None or done < limit):
            tokens, cache = self._unspilled.popitem()
            if self.disk is not None and self.disk.serialize(list(tokens), cache):
                done += 1
        return done

    def insert(self, tokens: list[int], cache: list[Any]) -> None:
        """Keep ``cache`` (the KV state of exactly ``tokens``) for reuse.

        Evaluates the state first; the cache object is owned by the prefix
        cache afterwards (lookups hand out copies). A state whose layers do
        not hold exactly ``len(tokens)`` tokens (see
        :func:`~worker.caches.profile.held_tokens`) is never stored: it is
        logged as an error and counted in :attr:`refused` (a later lookup
        then misses instead of continuing from a wrong state).
        """
        if not tokens or self.budget_bytes <= 0:
            return
        held = held_tokens(cache)
        if held is not None and held != len(tokens):
            self.refused += 1
            log.error("refused to cache a state holding %d tokens under a %d-token prefix", held, len(tokens))
            return
        if self.kv_bits:
            cache = _quantized(cache, self.kv_bits, self.kv_group_size)
        pin_untrimmable(cache)
        mx.eval([c.state for c in cache])
        self._lru.insert_cache(self.model_key, list(tokens), cache)
        if self.disk is not None and len(tokens) >= self.disk_min_tokens:
            self._unspilled[tuple(tokens)] = cache
            while len(self._unspilled) > MAX_UNSPILLED:
                self._unspilled.pop(next(iter(self._unspilled)))

    def fit(self, max_bytes: int) -> None:
        """Evict entries, least recently used first, until at most
        ``min(max_bytes, budget_bytes)`` bytes are held: the room a KV
        budget's running sequences leave (see :mod:`worker.engine.kv_budget`).
        Not counted in :attr:`evictions`, which counts entries evicted for
        an insert. An evicted entry the disk tier has not got yet is dropped
        from its queue too (its memory must go now), so it never reaches
        the disk."""
        if self._lru.nbytes > max_bytes:
            self._lru.trim_to(n_bytes=max_bytes)
            self._unspilled = {k: v for k, v in self._unspilled.items() if self._lru.holds(self.model_key, k)}

    @property
    def disk_min_tokens(self) -> int:
        """The shortest entry worth a file."""
        from worker.caches.disk import MIN_TOKENS

        return MIN_TOKENS

    def clear(self, disk: bool = False) -> tuple[int, int, int, int]:
        """Drop every entry (model reloaded, memory pressure, or asked to);
        entries already on disk stay there unless ``disk`` (then the disk
        tier is emptied too, see :meth:`worker.caches.disk.DiskTier.clear`).
        Returns the entries and bytes dropped from memory, then from disk."""
        entries, nbytes = self.entries, self.nbytes
        self._lru.trim_to(n_sequences=0)
        self._unspilled.clear()
        disk_entries = disk_bytes = 0
        if disk and self.disk is not None:
            disk_entries, disk_bytes = self.disk.clear()
        return entries, nbytes, disk_entries, disk_bytes


class _CountingLRU(LRUPromptCache):
    """mlx-lm's ``LRUPromptCache``, unchanged, counting in ``evictions`` the
    entries its inserts evict for room: during ``insert_cache`` each call
    of its recency order's ``pop`` is one (an entry a longer one of the
    same prefix supersedes leaves through ``remove`` instead; ``trim_to``,
    which a clear uses, is not counted)."""

    def __init__(self, max_size: int, max_bytes: int) -> None:
        super().__init__(max_size=max_size, max_bytes=max_bytes)
        self.evictions = 0

    def holds(self, model: Any, tokens: tuple[int, ...]) -> bool:
        """Whether an entry is stored under exactly ``tokens``."""
        try:
            self._trie.get(model, list(tokens))
        except KeyError:
            return False
        return True

    def insert_cache(self, *args: Any, **kwargs: Any) -> None:
        """``LRUPromptCache.insert_cache``, counting its evictions."""
        order = self._lru
        pop = order.pop

        def counted() -> Any:
            self.evictions += 1
            return pop()

        order.pop = counted
        try:
            super().insert_cache(*args, **kwargs)
        finally:
            del order.pop  # the class's own pop again


def _quantized(cache: list[Any], bits: int, group_size: int) -> list[Any]:
    """``cache`` with each plain KV layer quantized (others unchanged)."""
    from mlx_lm.models.cache import KVCache

    out = []
    for c in cache:
        if type(c) is KVCache and c.keys is not None:
            width_ok = c.keys.shape[-1] % group_size == 0 and c.values.shape[-1] % group_size == 0
            if width_ok:
                keys, values = c.keys[..., : c.offset, :], c.values[..., : c.offset, :]
                plain = KVCache()
                plain.keys, plain.values, plain.offset = keys, values, c.offset
                c = plain.to_quantized(group_size=group_size, bits=bits)
        out.append(c)
    return out


def _dequantized(cache: list[Any]) -> list[Any]:
    """``cache`` with each quantized KV layer turned back into a plain one
    (for a model whose running sequences keep full-precision KV)."""
    from mlx_lm.models.cache import KVCache, QuantizedKVCache

    out = []
    for c in cache:
        if isinstance(c, QuantizedKVCache) and c.keys is not None:
            plain = KVCache()
            keys, values = c.keys_and_values()
            plain.keys = mx.dequantize(*keys, group_size=c.group_size, bits=c.bits)
            plain.values = mx.dequantize(*values, group_size=c.group_size, bits=c.bits)
            plain.offset = c.offset
            c = plain
        out.append(c)
    return out
