"""The idle scheduler's burst gathering (worker/engine/scheduler.py ``_gather_burst``)
and its other half, the worker's input thread setting ``preparing``
(worker/main.py ``_input_loop``).

Commands are fed from another thread with gaps longer than ``BURST_GAP``:
without the input thread's ``preparing`` signal the gather stops at the
first gap; with it, the gather keeps taking commands until the signal is
cleared (bounded by ``PREPARING_WINDOW``). Unknown-request aborts are used
as commands: they change nothing but are taken off the inbox like any
admission. Then the real input loop reads real requests from a ZeroMQ
socket while an idle scheduler gathers: the signal is set from the first
request it reads until its socket is empty, so the gather takes a burst
whose requests take longer to prepare than a gap. No model is loaded (the
gather touches no MLX; a prompt builder stand-in holds each request until
the test lets it go).
"""

from __future__ import annotations

import queue
import threading
import time
import uuid

import zmq

from shared.codec import gateway_codec
from shared.config import ModelConfig
from shared.protocol import GenerateRequest, SamplingParams, Shutdown
from worker.engine import scheduler as scheduler_module
from worker.engine.scheduler import Scheduler
from worker.main import Worker
from worker.messages import Abort

GAP = 0.2
"""Seconds between fed commands: beyond BURST_GAP and BURST_WINDOW."""


def idle_scheduler() -> Scheduler:
    """A scheduler with no model; only its inbox and gather are used."""
    return Scheduler(
        None, set(), lambda _: None, cache=None, max_batch_size=4, prefill_batch_size=2, prefill_step_size=16
    )


def feed(scheduler: Scheduler, count: int, clear_after: bool, after: threading.Event | None = None) -> threading.Thread:
    """Put ``count`` commands ``GAP`` apart from another thread, the way the
    input thread submits a burst it is still tokenizing; clear
    ``preparing`` after the last one when ``clear_after``. With ``after``,
    the first command waits for that event too (e.g. the gather having
    waited through a gap), however late the gather starts."""

    def run() -> None:
        if after is not None:
            assert after.wait(60), "the gather never waited"
        for i in range(count):
            time.sleep(GAP)
            scheduler.submit(Abort([f"gone-{i}"]))
        if clear_after:
            scheduler.preparing.clear()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_without_the_signal_a_gap_ends_the_burst():
    scheduler = idle_scheduler()
    scheduler.inbox = WatchedInbox()
    # the commands follow the gather's first empty wait (a gap), so none can arrive before it
    feeder = feed(scheduler, 3, clear_after=False, after=scheduler.inbox.gap)
    assert scheduler._gather_burst()
    feeder.join(60)
    assert not feeder.is_alive(), "the feeder never finished"
    assert scheduler.inbox.qsize() == 3  # the gather ended at the gap: it took none of them


def test_while_requests_are_being_prepared_the_gather_waits_for_them(monkeypatch):
    # a window far longer than the feed (which the signal, cleared after the last command, ends
    # first): a slow machine's late feeder thread is still waited for
    monkeypatch.setattr(scheduler_module, "PREPARING_WINDOW", 300 * GAP)
    scheduler = idle_scheduler()
    scheduler.preparing.set()
    feeder = feed(scheduler, 3, clear_after=True)
    assert scheduler._gather_burst()
    feeder.join(60)
    assert not feeder.is_alive(), "the feeder never finished"
    assert scheduler.inbox.qsize() == 0  # all three were taken by the gather


def test_the_signal_never_holds_the_engine_past_its_window(monkeypatch):
    monkeypatch.setattr(scheduler_module, "PREPARING_WINDOW", 0.1)
    scheduler = idle_scheduler()
    scheduler.preparing.set()  # never cleared: a stuck input thread
    started = time.monotonic()
    assert scheduler._gather_burst()
    assert time.monotonic() - started < 5.0


class WatchedInbox(queue.Queue):
    """A scheduler inbox that signals ``gap`` each time a wait with a
    timeout finds it empty (the gather waited through a gap)."""

    def __init__(self) -> None:
        super().__init__()
        self.gap = threading.Event()

    def get(self, block: bool = True, timeout: float | None = None):
        """``Queue.get``; an empty timed wait sets :attr:`gap`."""
        try:
            return super().get(block, timeout)
        except queue.Empty:
            if block and timeout is not None:
                self.gap.set()
            raise


class HeldPrompts:
    """The input thread's prompt builder, standing in for a slow tokenizer:
    :meth:`build` records whether ``preparing`` is set and waits until the
    test releases the request; it returns an abort of an unknown request
    (a command the model-less scheduler takes off its inbox)."""

    def __init__(self, preparing: threading.Event, ids: list[str]) -> None:
        self.preparing = preparing
        self.release = {request_id: threading.Event() for request_id in ids}
        self.seen: list[tuple[str, bool]] = []

    def build(self, request: GenerateRequest) -> Abort:
        """Record, wait for the release, hand back the command."""
        self.seen.append((request.request_id, self.preparing.is_set()))
        assert self.release[request.request_id].wait(30)
        return Abort([request.request_id])


class RecordingScheduler(Scheduler):
    """A model-less scheduler that records what it applies and whether
    ``preparing`` was set when each command was submitted."""

    def __init__(self) -> None:
        super().__init__(
            None, set(), lambda _: None, cache=None, max_batch_size=4, prefill_batch_size=2, prefill_step_size=16
        )
        self.inbox = WatchedInbox()
        self.applied: list[str] = []
        self.submitted: list[tuple[str, bool]] = []

    def submit(self, item: object) -> None:
        """Record the signal at submission, then queue."""
        self.submitted.append((item.request_ids[0], self.preparing.is_set()))
        super().submit(item)

    def _apply(self, item: object) -> None:
        self.applied.append(item.request_ids[0])


def test_the_input_thread_keeps_the_gather_waiting_for_its_burst(monkeypatch):
    monkeypatch.setattr(scheduler_module, "PREPARING_WINDOW", 30.0)  # only the signal ends the gather
    ids = ["a", "b", "c"]
    scheduler = RecordingScheduler()
    prompts = HeldPrompts(scheduler.preparing, ids)
    ctx = zmq.Context()
    endpoint = f"inproc://requests-{uuid.uuid4().hex}"
    gateway = ctx.socket(zmq.PUSH)
    gateway.bind(endpoint)
    requests = ctx.socket(zmq.PULL)
    requests.connect(endpoint)
    outputs = ctx.socket(zmq.PUSH)  # the output thread is not started: nothing is sent on it
    worker = Worker("w-1", ModelConfig(name="m"), requests, outputs)
    worker._scheduler, worker._prompts = scheduler, prompts
    worker._ready.set()
    result: list[int] = []
    input_thread = threading.Thread(target=lambda: result.append(worker._input_loop()), daemon=True)
    gathered = threading.Event()

    def idle_engine() -> None:  # what Scheduler.run does for a request reaching an idle engine
        scheduler._apply_queued(scheduler.inbox.get(timeout=60))
        scheduler._gather_burst()
        gathered.set()

    engine_thread = threading.Thread(target=idle_engine, daemon=True)
    codec = gateway_codec()
    try:
        input_thread.start()
        engine_thread.start()
        for request_id in ids:
            sampling = SamplingParams(temperature=0.0, max_tokens=4)
            gateway.send(codec.encode(GenerateRequest(request_id=request_id, sampling=sampling, prompt_token_ids=[1])))
        prompts.release["a"].set()
        for request_id in ids[1:]:  # each next request is ready only after the gather waited through a gap
            deadline = time.monotonic() + 30
            while not (scheduler.inbox.gap.wait(0.05) or gathered.is_set()):
                assert time.monotonic() < deadline, "the gather neither waited nor ended"
            scheduler.inbox.gap.clear()
            prompts.release[request_id].set()
        assert gathered.wait(30)
        assert scheduler.applied == ids  # the whole burst, not just what came before the first gap
        assert prompts.seen == [(i, True) for i in ids]  # set while each request is prepared ...
        assert scheduler.submitted == [(i, True) for i in ids]  # ... and when it is handed over
        deadline = time.monotonic() + 30
        while scheduler.preparing.is_set():  # cleared once the socket is empty
            assert time.monotonic() < deadline, "the input thread never cleared preparing"
            time.sleep(0.01)
        gateway.send(codec.encode(Shutdown()))
        input_thread.join(30)
        assert not input_thread.is_alive(), "the input thread did not end on Shutdown"
        assert result == [0]
    finally:
        for release in prompts.release.values():
            release.set()
        for sock in (gateway, requests, outputs):
            sock.close(0)
        ctx.term()
