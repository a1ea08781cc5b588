"""The scheduler never runs more than ``ahead`` steps past the output thread
(:class:`worker.messages.OutputPace`), and a queued command always ends
its wait: the bound that makes a stop string end its choice at once
however late the output thread runs, without ever holding up a Stop."""

import threading

from worker.messages import OutputPace


def _waiter(pace: OutputPace, pending: threading.Event) -> threading.Event:
    """Start a scheduler-like thread blocked in ``pace.wait(2, ...)``; the
    returned event is set when its wait returns."""
    returned = threading.Event()

    def run() -> None:
        pace.wait(2, pending.is_set)
        returned.set()

    threading.Thread(target=run, daemon=True).start()
    return returned


def test_wait_returns_at_once_within_the_bound():
    pace = OutputPace()
    for _ in range(2):
        pace.emitted()
    pace.wait(2, lambda: False)  # two unhandled steps: within the bound, no wait


def test_a_step_past_the_bound_waits_until_the_output_thread_handles_one():
    pace, pending = OutputPace(), threading.Event()
    for _ in range(3):
        pace.emitted()
    returned = _waiter(pace, pending)
    assert not returned.wait(0.3)  # three steps ahead: the scheduler waits
    pace.handled()
    assert returned.wait(10)


def test_a_queued_command_ends_the_wait():
    pace, pending = OutputPace(), threading.Event()
    for _ in range(5):
        pace.emitted()
    returned = _waiter(pace, pending)
    assert not returned.wait(0.3)
    pending.set()  # e.g. the worker's Stop, or the Release of a stopped choice
    pace.wake()
    assert returned.wait(10)
