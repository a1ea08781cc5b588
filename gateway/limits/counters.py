"""The counters of each API key: sliding one-minute windows of requests and
tokens, requests in flight, and totals for ``/metrics``.

:class:`KeyLimits` holds one :class:`KeyCounters` per key *name* for the
gateway's lifetime, so a config reload that keeps a key's name keeps its
windows and totals (and one that changes its limits applies the new limits
to the same history). A window counts what happened in the last
:data:`WINDOW` seconds: a request when it was admitted, tokens (prompt plus
completion) when their request ended. Limits come from the key's
:class:`shared.config.ApiKeyConfig` at each call (0: no limit).

Event loop only (no locks); times are :func:`time.monotonic` values from
the injected clock.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from shared.config import ApiKeyConfig

WINDOW = 60.0
"""Seconds of history a per-minute limit counts."""

LIMIT_KINDS = ("requests", "tokens", "concurrency")
"""What a refusal can be for (the ``limit`` label in ``/metrics``)."""


@dataclass(frozen=True)
class Refusal:
    """A request over one of its key's limits: which (``limit``, one of
    :data:`LIMIT_KINDS`), the limit, what is used, and ``retry_after``
    (seconds until a retry can be admitted, at least 1)."""

    limit: str
    allowed: int
    used: int
    retry_after: int


@dataclass(frozen=True)
class WindowState:
    """One limit's state for the response headers: the limit, what is left
    of it now, and the seconds until its window is empty again (fully
    replenished)."""

    limit: int
    remaining: int
    reset: float


@dataclass
class KeyCounters:
    """One key's windows, requests in flight and totals."""

    requests: deque[float] = field(default_factory=deque)
    tokens: deque[tuple[float, int]] = field(default_factory=deque)
    tokens_in_window: int = 0
    in_flight: int = 0
    total_requests: int = 0
    total_tokens: int = 0
    refused: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LIMIT_KINDS, 0))

    def expire(self, now: float) -> None:
        """Drop what is older than :data:`WINDOW` seconds."""
        while self.requests and self.requests[0] <= now - WINDOW:
            self.requests.popleft()
        while self.tokens and self.tokens[0][0] <= now - WINDOW:
            self.tokens_in_window -= self.tokens.popleft()[1]

    def refusal(self, entry: ApiKeyConfig, now: float) -> Refusal | None:
        """The first limit of ``entry`` a new request would break now
        (concurrency, then requests, then tokens), or None."""
        self.expire(now)
        if entry.concurrent_requests and self.in_flight >= entry.concurrent_requests:
            return Refusal("concurrency", entry.concurrent_requests, self.in_flight, 1)
        rpm = entry.requests_per_minute
        if rpm and len(self.requests) >= rpm:
            frees = self.requests[len(self.requests) - rpm] + WINDOW - now
            return Refusal("requests", rpm, len(self.requests), _seconds(frees))
        tpm = entry.tokens_per_minute
        if tpm and self.tokens_in_window >= tpm:
            used = self.tokens_in_window
            for at, spent in self.tokens:
                used -= spent
                if used < tpm:
                    return Refusal("tokens", tpm, self.tokens_in_window, _seconds(at + WINDOW - now))
        return None

    def admit(self, now: float) -> None:
        """Count an admitted request (in its window, in flight, in total)."""
        self.requests.append(now)
        self.in_flight += 1
        self.total_requests += 1

    def release(self) -> None:
        """An admitted request's answer is over."""
        self.in_flight -= 1

    def spend(self, tokens: int, now: float) -> None:
        """Count the tokens of a request that ended."""
        if tokens <= 0:
            return
        self.expire(now)
        self.tokens.append((now, tokens))
        self.tokens_in_window += tokens
        self.total_tokens += tokens

    def window(self, kind: str, limit: int, now: float) -> WindowState:
        """The state of the ``requests`` or ``tokens`` window against
        ``limit``."""
        self.expire(now)
        if kind == "requests":
            used, last = len(self.requests), (self.requests[-1] if self.requests else None)
        else:
            used, last = self.tokens_in_window, (self.tokens[-1][0] if self.tokens else None)
        reset = 0.0 if last is None else max(0.0, last + WINDOW - now)
        return WindowState(limit, max(0, limit - used), reset)


def _seconds(value: float) -> int:
    """Whole seconds, rounded up, at least 1 (a ``Retry-After`` value)."""
    return max(1, math.ceil(value))


class KeyLimits:
    """Every key's :class:`KeyCounters`, by key name, for the gateway's
    lifetime. ``clock`` gives monotonic seconds (tests pass a fake one)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.keys: dict[str, KeyCounters] = {}

    def of(self, name: str) -> KeyCounters:
        """The counters of the key named ``name`` (created empty)."""
        counters = self.keys.get(name)
        if counters is None:
            counters = self.keys[name] = KeyCounters()
        return counters

    def spender(self, name: str) -> Callable[[int], None]:
        """What a request of key ``name`` reports its tokens to."""
        counters = self.of(name)
        return lambda tokens: counters.spend(tokens, self.clock())
