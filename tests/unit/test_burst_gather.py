"""The idle scheduler's burst gathering (worker/engine/scheduler.py ``_gather_burst``).

Commands are fed from another thread with gaps longer than ``BURST_GAP``:
without the input thread's ``preparing`` signal the gather stops at the
first gap; with it, the gather keeps taking commands until the signal is
cleared (bounded by ``PREPARING_WINDOW``). Unknown-request aborts are used
as commands: they change nothing but are taken off the inbox like any
admission. No model is loaded (the gather touches no MLX).
"""

from __future__ import annotations

import threading
import time

from worker.engine import scheduler as scheduler_module
from worker.engine.scheduler import Scheduler
from worker.messages import Abort

GAP = 0.2
"""Seconds between fed commands: beyond BURST_GAP and BURST_WINDOW."""


def idle_scheduler() -> Scheduler:
    """A scheduler with no model; only its inbox and gather are used."""
    return Scheduler(
        None, set(), lambda _: None, cache=None, max_batch_size=4, prefill_batch_size=2, prefill_step_size=16
    )


def feed(scheduler: Scheduler, count: int, clear_after: bool) -> threading.Thread:
    """Put ``count`` commands ``GAP`` apart from another thread, the way the
    input thread submits a burst it is still tokenizing; clear
    ``preparing`` after the last one when ``clear_after``."""

    def run() -> None:
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
    feeder = feed(scheduler, 3, clear_after=False)
    assert scheduler._gather_burst()
    assert scheduler.inbox.qsize() == 0  # nothing arrived within the first gap
    feeder.join()
    assert scheduler.inbox.qsize() == 3


def test_while_requests_are_being_prepared_the_gather_waits_for_them(monkeypatch):
    monkeypatch.setattr(scheduler_module, "PREPARING_WINDOW", 10 * GAP)
    scheduler = idle_scheduler()
    scheduler.preparing.set()
    feeder = feed(scheduler, 3, clear_after=True)
    assert scheduler._gather_burst()
    feeder.join()
    assert scheduler.inbox.qsize() == 0  # all three were taken by the gather


def test_the_signal_never_holds_the_engine_past_its_window(monkeypatch):
    monkeypatch.setattr(scheduler_module, "PREPARING_WINDOW", 0.1)
    scheduler = idle_scheduler()
    scheduler.preparing.set()  # never cleared: a stuck input thread
    started = time.monotonic()
    assert scheduler._gather_burst()
    assert time.monotonic() - started < 5.0
