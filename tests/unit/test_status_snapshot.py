"""``GET /v1/status`` reads each model from its worker's latest heartbeat
(:class:`gateway.dashboard.snapshot.StatusBuilder`), here over a fake pool:
the KV-memory budget's fields land in the model's ``kv`` object, which is
all 0 for a model without a worker."""

from __future__ import annotations

from types import SimpleNamespace

import msgspec

from gateway.dashboard.recorder import ActivityRecorder
from gateway.dashboard.schema import KVStatus, Status
from gateway.dashboard.snapshot import StatusBuilder
from gateway.workers.status import WorkerStatus
from shared.protocol import WorkerStats
from tests.unit.test_worker_heartbeat import KV


def handle(name: str, status: WorkerStatus) -> SimpleNamespace:
    """A worker handle stand-in with ``status``, nothing in flight."""
    return SimpleNamespace(status=status, inflight=0, expires_at=lambda: None, model=SimpleNamespace(node=None))


def builder(**statuses: WorkerStatus) -> StatusBuilder:
    """A StatusBuilder over a pool of one model per ``statuses`` entry."""
    models = [SimpleNamespace(name=name, aliases=[], speculative="none") for name in statuses]
    pool = SimpleNamespace(
        config=SimpleNamespace(models=models, nodes=[]),
        handles={name: handle(name, status) for name, status in statuses.items()},
        draining=False,
        memory=SimpleNamespace(budget=lambda: 0, estimate=lambda h: 0),
        kind=lambda name: "generate",
    )
    return StatusBuilder(pool, None, ActivityRecorder(), wall=lambda: 1000.0)


def test_the_kv_budget_of_the_latest_heartbeat_is_the_models_kv():
    """Each KV field of the heartbeat is the ``kv`` field it names; a model
    with no worker (whose last heartbeat is stale) reads as no budget; the
    JSON decodes strictly into the published Struct."""
    live = WorkerStatus(state="ready", pid=1, stats=WorkerStats(running=1, **KV))
    gone = WorkerStatus(state="unloaded", pid=None, stats=WorkerStats(**KV))
    status = builder(live=live, gone=gone).status()
    kv = {m.name: m.kv for m in status.models}
    assert kv["live"] == KVStatus(bytes=3 << 20, budget_bytes=8 << 20, waiting=2, preemptions=5, waited=7, tokens=900)
    assert kv["gone"] == KVStatus(bytes=0, budget_bytes=0, waiting=0, preemptions=0, waited=0, tokens=0)
    body = msgspec.json.encode(status)
    assert msgspec.json.decode(body)["models"][0]["kv"] == {
        "bytes": 3 << 20,
        "budget_bytes": 8 << 20,
        "waiting": 2,
        "preemptions": 5,
        "waited": 7,
        "tokens": 900,
    }
    assert msgspec.json.decode(body, type=Status, strict=True) == status
