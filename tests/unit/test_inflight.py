"""gateway/workers/inflight.py: the requests in flight on one worker. Slots are
counted per open choice, every request writes exactly one log line, and a
request the gateway aborts frees its slot at once but logs when the worker
reports its end (or when the worker dies). No processes: the worker's
incarnation is a recording fake."""

from __future__ import annotations

import logging

import pytest

from gateway.workers.inflight import MAX_BUFFERED_OUTPUTS, InflightRequests, PendingRequest, WorkerRequestStream
from shared.protocol import AbortRequest, RequestOutput

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


class Incarnation:
    """The part of :class:`gateway.workers.process.Incarnation` the table uses."""

    def __init__(self, number: int = 1) -> None:
        self.number = number
        self.sent: list[object] = []

    def send(self, message: object) -> bool:
        self.sent.append(message)
        return True


def table() -> tuple[InflightRequests, list[int]]:
    retired: list[int] = []
    requests = InflightRequests(on_retired=lambda: retired.append(1))
    return requests, retired


def one_request(n: int) -> tuple[InflightRequests, list[int], Incarnation, PendingRequest]:
    """A table holding request ``r`` of ``n`` choices, sent to incarnation 1."""
    requests, retired = table()
    worker = Incarnation()
    pending = PendingRequest(worker.number, n, None, "m")
    requests.add("r", pending)
    return requests, retired, worker, pending


def out(index: int = 0, tokens: int = 0, reason: str | None = None, prompt: int = 0, rid: str = "r") -> RequestOutput:
    return RequestOutput(
        request_id=rid, index=index, completion_tokens=tokens, finish_reason=reason, prompt_tokens=prompt
    )


def log_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "mlxd.requests"]


async def test_a_two_choice_request_holds_two_slots_until_each_choice_ends(caplog):
    caplog.set_level(logging.INFO, logger="mlxd.requests")
    requests, retired, worker, pending = one_request(2)
    assert (len(requests), requests.sequences) == (1, 2)
    requests.route(out(0, 1, prompt=7), worker)
    requests.route(out(0, 2, "stop"), worker)
    assert (len(requests), requests.sequences, retired) == (1, 1, [])
    requests.route(out(1, 3, "length"), worker)
    assert (len(requests), requests.sequences, retired) == (0, 0, [1])
    assert [pending.queue.get_nowait().finish_reason for _ in range(3)] == [None, "stop", "length"]
    (line,) = log_lines(caplog)
    assert "status=length prompt_tokens=7 cached_tokens=0 completion_tokens=5" in line
    requests.route(out(1, 4, "stop"), worker)  # nothing follows an end
    assert pending.queue.empty() and len(log_lines(caplog)) == 1


async def test_an_error_ends_every_choice_at_once():
    requests, retired, worker, _ = one_request(3)
    requests.route(RequestOutput(request_id="r", finish_reason="error", error="boom"), worker)
    assert (len(requests), requests.sequences, retired) == (0, 0, [1])


async def test_an_abort_frees_the_slot_now_and_logs_when_the_worker_ends_it(caplog):
    caplog.set_level(logging.INFO, logger="mlxd.requests")
    requests, retired, worker, pending = one_request(1)
    stream = WorkerRequestStream("r", pending, lambda rid, p: requests.abort(rid, p, worker))
    await stream.aclose()
    assert worker.sent == [AbortRequest(["r"])]
    assert (len(requests), requests.sequences, retired, log_lines(caplog)) == (0, 0, [1], [])
    requests.route(out(0, 2, "abort", prompt=11), worker)
    (line,) = log_lines(caplog)
    assert "status=abort prompt_tokens=11" in line
    assert pending.wait is not None and pending.wait.cancelled()


async def test_an_abort_for_a_dead_incarnation_logs_at_once(caplog):
    caplog.set_level(logging.INFO, logger="mlxd.requests")
    requests, _, _, pending = one_request(1)
    later = Incarnation(number=2)
    requests.abort("r", pending, later)
    assert later.sent == [] and len(log_lines(caplog)) == 1


async def test_fail_all_ends_what_runs_and_settles_what_waits(caplog):
    caplog.set_level(logging.INFO, logger="mlxd.requests")
    requests, _ = table()
    worker = Incarnation()
    running = PendingRequest(1, 2, None, "m")
    aborted = PendingRequest(1, 1, None, "m")
    requests.add("a", running)
    requests.add("b", aborted)
    requests.abort("b", aborted, worker)
    requests.fail_all("the worker died")
    final = running.queue.get_nowait()
    assert (final.finish_reason, final.error_kind, final.error) == ("error", "unavailable", "the worker died")
    assert (len(requests), requests.sequences) == (0, 0)
    assert sorted(line.split()[1] for line in log_lines(caplog)) == ["a", "b"]


async def test_a_client_that_stops_reading_is_aborted():
    requests, _, worker, pending = one_request(1)
    for i in range(MAX_BUFFERED_OUTPUTS):
        requests.route(out(0, i + 1), worker)
    requests.route(out(0, MAX_BUFFERED_OUTPUTS + 1), worker)
    assert worker.sent == [AbortRequest(["r"])] and len(requests) == 0
    last = None
    while not pending.queue.empty():
        last = pending.queue.get_nowait()
    assert last is not None and last.finish_reason == "abort"
