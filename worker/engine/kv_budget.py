"""The KV budget: what the running sequences' caches may cost, and what one
more sequence would cost.

A model's KV cost is read from its own cache, not from its config
(:meth:`KVProfile.of_cache`): a layer that keeps every token (mlx-lm's
``KVCache``, or ``QuantizedKVCache`` when ``kv_bits`` quantizes the running
sequences' KV) costs its bytes per token for each token a row holds, a
sliding-window layer (``RotatingKVCache``) at most its window plus one
prefill chunk, and a layer with fixed state (state-space, recurrent) the
same bytes whatever the length. mlx-lm's batch caches pad every row to the
longest one and grow in steps of :data:`GROWTH_STEP` tokens, so a batch
costs ``rows x row_bytes(longest)``.

:class:`KVLedger` is the scheduler's accounting of that cost against the
budget: a sequence may start when the batch with it, each row given room
for :data:`LOOKAHEAD` more tokens (or what it has left to generate), fits;
the running rows are over the budget when they no longer fit as they are
(the scheduler then preempts the newest); whatever the rows leave is what
the prefix cache may hold (:meth:`KVLedger.room`). The rows may take only
half the budget (:data:`TRANSIENT`).

:func:`budget_bytes` turns a model's ``kv_budget`` setting into bytes.
Nothing here calls MLX except :meth:`KVProfile.of_cache` (array sizes),
which runs on the scheduler thread.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("mlxd.worker.kv_budget")

GROWTH_STEP = 256
"""Tokens by which mlx-lm's KV caches grow their buffers: a row holding
``t`` tokens has at most ``t + GROWTH_STEP - 1`` allocated."""

LOOKAHEAD = 256
"""Tokens of growth a sequence must have room for, beside the prompt it
holds, before it starts (fewer when it may generate fewer)."""

TRANSIENT = 2
"""How many times the rows' KV may be held at once: when mlx-lm merges a
prefilled chunk into the running batch, or filters finished rows out of it,
it builds the new caches from the old ones, and both exist until the step
ends. So the rows are admitted against half the budget, and the budget
bounds the peak rather than the steady state."""

ROW_BOOKKEEPING = 64
"""Bytes per layer and row a batch cache keeps beside the state a lone
sequence's cache shows (offsets, padding, lengths)."""

AUTO_SHARE = 0.85
"""The share of the memory MLX may use that ``kv_budget = "auto"`` gives
the model's weights and KV together (the rest is activations and other
processes' headroom)."""


@dataclass(frozen=True)
class KVProfile:
    """One row's KV cost: ``per_token`` bytes per token over the layers that
    keep every token, ``windows`` one ``(bytes per token, most tokens
    held)`` per sliding-window layer, ``fixed`` bytes that do not grow."""

    per_token: int
    windows: tuple[tuple[int, int], ...]
    fixed: int

    @classmethod
    def of_cache(cls, cache: list[Any], chunk: int) -> KVProfile:
        """The profile of a model, read from ``cache``: one sequence's prompt
        cache (batch size 1) after at least one token. A quantized KV layer
        (keys and values as ``mx.quantize`` triples: packed data, scales,
        biases) costs the bytes of all three per token. ``chunk``: the
        prefill step, by which a window's buffer may run past its size
        while a prompt is fed."""
        per_token = 0
        windows: list[tuple[int, int]] = []
        layers = _layers(cache)
        fixed = ROW_BOOKKEEPING * len(layers)
        for layer in layers:
            keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
            if keys is None or values is None or not hasattr(layer, "offset"):
                fixed += _state_bytes(layer)
                continue
            keys, values = _arrays(keys), _arrays(values)
            held = max(int(keys[0].shape[-2]), 1)
            row = sum(int(a.nbytes) for a in (*keys, *values)) // held
            window = getattr(layer, "max_size", None)
            if window:
                windows.append((row, int(window) + chunk - 1))
            else:
                per_token += row
        return cls(per_token, tuple(windows), fixed)

    def row_bytes(self, tokens: int) -> int:
        """The most one row holding ``tokens`` tokens can have allocated."""
        held = tokens + GROWTH_STEP - 1
        return self.per_token * held + sum(row * min(held, cap) for row, cap in self.windows) + self.fixed

    def describe(self) -> str:
        """The profile in words, for the log."""
        windows = ", ".join(f"{row} B/token up to {cap} tokens" for row, cap in self.windows)
        return f"{self.per_token} B/token" + (f", windows {windows}" if windows else "") + f", {self.fixed} B fixed"


class KVLedger:
    """The running rows' KV cost against ``budget`` bytes (see the module
    docstring). Rows are keyed by the engine's uid and kept in the order
    they started; each holds ``[tokens, left]`` (tokens in its cache,
    tokens it may still generate). ``lookahead``: the tokens of growth a
    row must have room for to start (:data:`LOOKAHEAD`; tests lower it so
    that short answers outgrow their booking). Scheduler thread only."""

    def __init__(self, profile: KVProfile, budget: int, lookahead: int = LOOKAHEAD) -> None:
        self.profile = profile
        self.budget = budget
        self.lookahead = lookahead
        self._rows: dict[int, list[int]] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, uid: int, tokens: int, left: int) -> None:
        """Row ``uid`` started, holding ``tokens`` and allowed ``left`` more."""
        self._rows[uid] = [tokens, left]

    def drop(self, uid: int) -> None:
        """Row ``uid`` left the engine (a no-op for an unknown uid)."""
        self._rows.pop(uid, None)

    def grew(self, uid: int) -> None:
        """Row ``uid`` got one more token."""
        row = self._rows.get(uid)
        if row is not None:
            row[0] += 1
            row[1] -= 1

    def newest(self) -> list[int]:
        """The rows' uids, the most recently started first."""
        return list(reversed(self._rows))

    def tokens(self) -> int:
        """Tokens the rows' caches hold now, all rows together."""
        return sum(tokens for tokens, _ in self._rows.values())

    def nbytes(self) -> int:
        """What the rows' caches are bounded by now (no lookahead, held once)."""
        if not self._rows:
            return 0
        return len(self._rows) * self.profile.row_bytes(max(tokens for tokens, _ in self._rows.values()))

    def _bound(self, rows: list[tuple[int, int]], lookahead: bool) -> int:
        if not rows:
            return 0
        longest = max(tokens + (max(0, min(left, self.lookahead)) if lookahead else 0) for tokens, left in rows)
        return TRANSIENT * len(rows) * self.profile.row_bytes(longest)

    def fits(self, new: list[tuple[int, int]]) -> bool:
        """Whether rows ``new`` (``(tokens, left)`` each) may start beside
        the running ones, every row with room for its lookahead."""
        return self._bound([*map(tuple, self._rows.values()), *new], lookahead=True) <= self.budget

    def over(self) -> bool:
        """Whether the running rows, as they are, no longer fit."""
        return self._bound([*map(tuple, self._rows.values())], lookahead=False) > self.budget

    def room(self) -> int:
        """Bytes of the budget the rows (with their lookahead) leave free:
        what the prefix cache may hold."""
        return max(0, self.budget - self._bound([*map(tuple, self._rows.values())], lookahead=True))

    def lone_tokens(self) -> int:
        """The most tokens one row may ever hold alone within the budget
        (0: not even one)."""
        if TRANSIENT * self.profile.row_bytes(1) > self.budget:
            return 0
        low, high = 1, 1 << 24
        while low < high:
            mid = (low + high + 1) // 2
            if TRANSIENT * self.profile.row_bytes(mid) <= self.budget:
                low = mid
            else:
                high = mid - 1
        return low


def budget_bytes(setting: int | str, usable: int, weights: int) -> int:
    """The KV budget in bytes for a model's ``kv_budget`` ``setting``
    (0: none). ``"auto"``: :data:`AUTO_SHARE` of ``usable`` (the memory MLX
    may use: Metal's recommended working set, or the memory limit in
    effect, whichever is lower) less the ``weights``; a share such as
    ``"40%"``: that share of ``usable`` less the weights; bytes or a size
    such as ``"2GiB"`` as given; 0: no budget. An automatic budget that
    leaves nothing (the weights alone fill the memory) is none, logged.

    Raises:
        ValueError: ``setting`` is none of those (the config loader checks
        it first).
    """
    from shared.config_values import parse_size

    after_weights = max(0, usable - weights)
    if setting == "auto":
        budget = int(usable * AUTO_SHARE) - weights
        if budget <= 0:
            log.warning("the weights (%d bytes) leave no memory for a KV budget; running without one", weights)
            return 0
        return budget
    return parse_size(setting, after_weights)


def _layers(cache: list[Any]) -> list[Any]:
    """The cache's layers, a ``CacheList``'s caches taken one by one."""
    found: list[Any] = []
    for layer in cache:
        inner = getattr(layer, "caches", None)
        if isinstance(inner, (list, tuple)):
            found.extend(_layers(list(inner)))
        else:
            found.append(layer)
    return found


def _arrays(part: Any) -> tuple[Any, ...]:
    """A layer's keys or values as a tuple of arrays: the array itself, or
    a quantized triple (data, scales, biases) as it is."""
    return tuple(part) if isinstance(part, (list, tuple)) else (part,)


def _state_bytes(layer: Any) -> int:
    """Bytes of the arrays in ``layer``'s state (0 when it has none yet)."""
    from mlx.utils import tree_flatten

    try:
        state = layer.state
    except Exception:  # a layer that has seen no token has no state to read
        return 0
    return sum(int(getattr(array, "nbytes", 0)) for _, array in tree_flatten(state))
