"""A worker's heartbeat carries its scheduler's counters
(:meth:`worker.main.Worker.stats`): here the KV-memory budget's, which the
scheduler writes into :class:`worker.messages.Counters`."""

from __future__ import annotations

from types import SimpleNamespace

from shared.protocol import WorkerStats
from worker.main import Worker
from worker.messages import Counters

KV = {
    "kv_bytes": 3 << 20,
    "kv_budget_bytes": 8 << 20,
    "kv_waiting": 2,
    "kv_preemptions": 5,
    "kv_waited": 7,
    "kv_tokens": 900,
}


def test_the_kv_budget_counters_reach_the_heartbeat():
    """Each ``kv_*`` counter is the heartbeat field of the same name."""
    scheduler = SimpleNamespace(counters=Counters(running=1, **KV), cache=None, speculation=None)
    stats = Worker.stats(SimpleNamespace(_scheduler=scheduler))  # type: ignore[arg-type]
    assert {name: getattr(stats, name) for name in KV} == KV
    assert stats.running == 1


def test_without_a_scheduler_there_is_no_budget():
    """Before the scheduler exists the heartbeat says no budget (all 0)."""
    stats = Worker.stats(SimpleNamespace(_scheduler=None))  # type: ignore[arg-type]
    assert stats == WorkerStats() and all(getattr(stats, name) == 0 for name in KV)
