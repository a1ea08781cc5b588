"""The per-key windows of :mod:`gateway.limits.counters` on a fake clock:
a full window refuses with the seconds until enough of it expires, tokens
count when spent, concurrency frees on release, and reset headers say when
a window is empty again."""

from __future__ import annotations

from gateway.limits.counters import KeyLimits
from gateway.limits.middleware import openai_duration, rate_headers
from shared.config import ApiKeyConfig


class Clock:
    """A settable monotonic clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_requests_window_slides():
    clock = Clock()
    limits = KeyLimits(clock)
    key = ApiKeyConfig(name="k", key="s", requests_per_minute=2)
    counters = limits.of("k")
    for step in (0.0, 10.0):
        clock.now += step
        assert counters.refusal(key, clock.now) is None
        counters.admit(clock.now)
        counters.release()
    clock.now += 5.0  # 15 s after the first request
    refusal = counters.refusal(key, clock.now)
    assert refusal is not None and (refusal.limit, refusal.allowed, refusal.used) == ("requests", 2, 2)
    assert refusal.retry_after == 45  # the first one leaves the window 60 s after it came
    clock.now += 45.0
    assert counters.refusal(key, clock.now) is None


def test_tokens_count_when_spent_and_expire():
    clock = Clock()
    limits = KeyLimits(clock)
    key = ApiKeyConfig(name="k", key="s", tokens_per_minute=100)
    counters = limits.of("k")
    spend = limits.spender("k")
    spend(60)
    clock.now += 20.0
    spend(50)
    refusal = counters.refusal(key, clock.now)
    assert refusal is not None and (refusal.limit, refusal.used) == ("tokens", 110)
    assert refusal.retry_after == 40  # when the first 60 tokens leave, 50 < 100 remain
    clock.now += 40.0
    assert counters.refusal(key, clock.now) is None
    assert counters.total_tokens == 110


def test_concurrency_frees_on_release():
    clock = Clock()
    counters = KeyLimits(clock).of("k")
    key = ApiKeyConfig(name="k", key="s", concurrent_requests=1)
    counters.admit(clock.now)
    refusal = counters.refusal(key, clock.now)
    assert refusal is not None and refusal.limit == "concurrency" and refusal.retry_after == 1
    counters.release()
    assert counters.refusal(key, clock.now) is None


def test_rate_headers_per_protocol():
    clock = Clock()
    counters = KeyLimits(clock).of("k")
    key = ApiKeyConfig(name="k", key="s", requests_per_minute=10)
    counters.admit(clock.now)
    clock.now += 0.5
    openai = rate_headers("/v1/chat/completions", key, counters, clock.now, wall=0.0)
    assert openai == {
        "x-ratelimit-limit-requests": "10",
        "x-ratelimit-remaining-requests": "9",
        "x-ratelimit-reset-requests": "59.5s",
    }
    anthropic = rate_headers("/v1/messages", key, counters, clock.now, wall=0.0)
    assert anthropic["anthropic-ratelimit-requests-reset"] == "1970-01-01T00:00:59Z"
    assert set(anthropic) == {f"anthropic-ratelimit-requests-{p}" for p in ("limit", "remaining", "reset")}
    assert [openai_duration(s) for s in (0.25, 1.5, 360.0)] == ["250ms", "1.5s", "6m0s"]
