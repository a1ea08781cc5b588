"""The prefix cache: KV state of earlier sequences, reused by prompts that
start with the same tokens.

A thin layer over mlx-lm's ``LRUPromptCache`` (a token trie with LRU
eviction under a byte budget) that adds what the scheduler needs: entries
keyed by the model's identity, a lookup that always leaves at least one
prompt token to feed, forced evaluation of inserted state (so no entry keeps
a whole batch's buffers alive through a lazy slice), and hit statistics.

Scheduler thread only: every method evaluates or copies MLX arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import LRUPromptCache, can_trim_prompt_cache, trim_prompt_cache

MAX_ENTRIES = 4096
"""Upper bound on cached sequences, whatever their size."""


@dataclass
class Lookup:
    """The result of :meth:`PrefixCache.fetch`.

    ``cache`` is a private copy covering ``prompt[:cached]`` (None when
    nothing was reused) and ``remaining`` the prompt tokens still to feed,
    never empty.
    """

    cache: list[Any] | None
    cached: int
    remaining: list[int]


class PrefixCache:
    """Reusable KV state of ``model_key``'s sequences, at most
    ``budget_bytes`` in total (entries are evicted least recently used
    first; an entry larger than the budget is not kept)."""

    def __init__(self, model_key: str, budget_bytes: int) -> None:
        self.model_key = model_key
        self.budget_bytes = budget_bytes
        self._lru = LRUPromptCache(max_size=MAX_ENTRIES, max_bytes=budget_bytes)
        self.queries = 0
        self.hits = 0
        self.reused_tokens = 0

    @property
    def nbytes(self) -> int:
        """Bytes of KV state held now (never above the budget)."""
        return self._lru.nbytes

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
        if cache is None:
            return Lookup(None, 0, list(prompt))
        cached = len(prompt) - len(remaining)
        if cached <= 0:
            return Lookup(None, 0, list(prompt))
        self.hits += 1
        self.reused_tokens += cached
        return Lookup(cache, cached, list(remaining))

    def insert(self, tokens: list[int], cache: list[Any]) -> None:
        """Keep ``cache`` (the KV state of exactly ``tokens``) for reuse.

        Evaluates the state first; the cache object is owned by the prefix
        cache afterwards (lookups hand out copies).
        """
        if not tokens or self.budget_bytes <= 0:
            return
        mx.eval([c.state for c in cache])
        self._lru.insert_cache(self.model_key, list(tokens), cache)

    def clear(self) -> None:
        """Drop every entry (model reloaded, or memory pressure)."""
        self._lru.trim_to(n_sequences=0)
