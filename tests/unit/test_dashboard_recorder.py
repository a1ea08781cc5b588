"""The dashboard's ring buffers (:mod:`gateway.dashboard.recorder`) on a fake
clock: per-second samples, recent requests, and the timer it pairs with
each Prometheus request timer."""

from __future__ import annotations

import pytest

from gateway.dashboard.recorder import ActivityRecorder, percentile, protocol_of
from gateway.metrics.registry import Metrics


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def recorder(**kw) -> tuple[ActivityRecorder, Clock]:
    clock = Clock()
    return ActivityRecorder(clock=clock, wall=lambda: clock.now + 1_000_000, **kw), clock


@pytest.mark.parametrize(
    ("values", "percent", "expected"),
    [([], 50, None), ([3.0], 95, 3.0), ([4, 1, 3, 2], 50, 2), ([4, 1, 3, 2], 95, 4), (list(range(1, 101)), 95, 95)],
)
def test_percentile_is_nearest_rank(values, percent, expected):
    assert percentile(values, percent) == expected


def test_protocols_by_path():
    assert protocol_of("/v1/chat/completions") == protocol_of("/v1/embeddings") == "openai"
    assert protocol_of("/v1/messages") == "anthropic" and protocol_of("/v1/responses") == "responses"
    assert protocol_of("/api/chat") == "ollama" and protocol_of("/v1/other") == "/v1/other"


def test_a_request_through_the_paired_timer():
    rec, clock = recorder()
    metrics = Metrics(lambda: [], clock=clock)
    timer = rec.metrics(metrics).request_started("m", request_id="req-1")
    clock.now += 0.25
    timer.output(tokens=0)  # nothing yet: no first token
    clock.now += 0.25
    timer.output(tokens=3)
    clock.now += 0.5
    running = rec.recent()[0]
    assert (running.id, running.model, running.finish, running.completion_tokens) == ("req-1", "m", None, 3)
    assert running.ttft_seconds == pytest.approx(0.5) and running.duration_seconds == pytest.approx(1.0)
    timer.finished(reason="length", prompt_tokens=10, cached_tokens=4, completion_tokens=5)
    timer.finished(reason="error", prompt_tokens=0, cached_tokens=0, completion_tokens=0)  # ignored, as the real one
    clock.now += 9
    done = rec.recent()[0]
    assert (done.finish, done.prompt_tokens, done.cached_tokens, done.completion_tokens) == ("length", 10, 4, 5)
    assert done.duration_seconds == pytest.approx(1.0) and timer.done
    # the Prometheus timer got every call too
    assert metrics.generation_tokens.labels("m")._value.get() == 5
    assert metrics.request_success.labels("m", "length")._value.get() == 1


def test_samples_count_tokens_and_first_tokens_per_second():
    rec, clock = recorder(samples=3)
    timers = [rec.metrics(Metrics(lambda: [], clock=clock)).request_started("m", request_id=f"r{i}") for i in range(3)]
    clock.now += 0.1
    timers[0].output(tokens=4)
    clock.now += 0.3
    timers[1].output(tokens=6)
    clock.now += 0.6
    first = rec.sample(({"m": 1024}, 2, 1))
    assert first.tokens_per_second == pytest.approx(10.0)
    assert (first.ttft_p50, first.ttft_p95) == (pytest.approx(0.1), pytest.approx(0.4))
    assert (first.memory_bytes, first.running, first.waiting) == ({"m": 1024}, 2, 1)
    clock.now += 2.0
    second = rec.sample(({}, 0, 0))
    assert second.tokens_per_second == 0 and second.ttft_p50 is None
    for _ in range(3):
        clock.now += 1.0
        rec.sample(({}, 0, 0))
    kept = rec.samples()
    assert len(kept) == 3 and kept[0].t > second.t  # a ring: the oldest went
    assert rec.samples(since=kept[1].t) == kept[2:]


def test_recent_requests_are_a_bounded_ring_newest_first():
    rec, _ = recorder(recent=2)
    for i in range(3):
        rec.started("m", f"r{i}")
    assert [r.id for r in rec.recent()] == ["r2", "r1"]
