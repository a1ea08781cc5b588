"""Drafting with a second, smaller model of the same tokenizer.

With ``speculative = "draft:<source>"`` the worker loads the model at
``<source>`` next to its own (:func:`worker.model_setup.speculation_for`)
and :class:`DraftModel` proposes each row's draft: its greedy continuation
of the row's history and pending token. A greedy draft is a deterministic
function of the row's tokens, so the engine verifies it exactly as a
prompt-lookup draft (:mod:`worker.speculation.step`): greedy rows keep
their tokens, sampled rows their distribution (the draw-and-compare rule
is exact for any deterministic proposal).

Each row has its own draft-model cache, kept between steps: before
drafting, the cache is cut back to the longest prefix it shares with the
row's history (the draft tokens verification rejected go) and the rest of
the history is fed in one forward pass, so a long prompt is read once, on
the row's first draft. Rows draft one after the other, one token per
forward pass of the draft model (it is meant to be much smaller than the
target). The draft model's cache must be trimmable (checked at load).

Threads: the scheduler thread only (the draft model's forward passes and
caches are MLX).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache


@dataclass
class _RowCache:
    cache: list[Any]
    held: list[int] = field(default_factory=list)


class DraftModel:
    """Greedy drafts from ``model`` (an mlx-lm model sharing the target's
    tokenizer), one cache per row. ``prefill_step``: most tokens fed in one
    forward pass when catching a row's cache up with its history."""

    def __init__(self, model: Any, prefill_step: int = 512) -> None:
        self.model = model
        self.prefill_step = prefill_step
        self._rows: dict[int, _RowCache] = {}

    def draft(self, uid: int, history: list[int], limit: int) -> list[int]:
        """Row ``uid``'s greedy continuation of ``history`` (its tokens and
        its pending token), ``limit`` tokens (none when ``limit`` < 1)."""
        if limit < 1:
            return []
        row = self._rows.get(uid)
        if row is None:
            row = self._rows[uid] = _RowCache(make_prompt_cache(self.model))
        common = _common_prefix(row.held, history)
        if common == len(history):
            common -= 1  # feed at least the last token to get its logits
        if common < len(row.held):
            for layer in row.cache:
                layer.trim(len(row.held) - common)
        logits = self._feed(row.cache, history[common:])
        drafted: list[int] = []
        while True:
            token = int(mx.argmax(logits).item())
            drafted.append(token)
            if len(drafted) == limit:
                break
            logits = self._feed(row.cache, [token])
        row.held = [*history, *drafted[:-1]]
        return drafted

    def _feed(self, cache: list[Any], tokens: list[int]) -> mx.array:
        """Run ``tokens`` through the draft model on ``cache`` in chunks of
        ``prefill_step``; return the last position's logits."""
        logits = None
        for i in range(0, len(tokens), self.prefill_step):
            logits = self.model(mx.array([tokens[i : i + self.prefill_step]]), cache=cache)[0, -1]
            mx.eval(logits)
        assert logits is not None  # callers feed at least one token
        return logits

    def forget(self, uid: int) -> None:
        """Drop row ``uid``'s cache (it finished or was removed)."""
        self._rows.pop(uid, None)


def _common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
