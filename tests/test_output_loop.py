"""The worker's output thread on its own (no MLX, no sockets): heartbeats
only from a whole worker, every running request ended when another thread
dies, one request's decoding failure confined to that request. Also the
name of what runs a worker's matrix products."""

from __future__ import annotations

import sys
import threading
import time

from shared.protocol import Heartbeat, StepOutputs, WorkerStats
from worker.messages import Abort, Started, TokenStep
from worker.model_setup import blas_in_use
from worker.output.detok import TokenDecoder
from worker.output.loop import Exit, FailAll, OutputLoop

TABLE = [b"Hel", b"lo", b" wor", b"ld", None]
"""Token 4 stands for a decoding bug: feeding it raises."""


def loop(healthy=lambda: True, interval=0.01):
    sent: list = []
    commands: list = []
    out = OutputLoop("w-1", send=sent.append, release=commands.append, stats=WorkerStats, heartbeat_interval=interval)
    out._healthy = healthy
    decoder = object.__new__(TokenDecoder)
    decoder.table = TABLE
    out.decoder = decoder
    return out, sent, commands


def run(out: OutputLoop, items: list, seconds: float = 0.0, until=None) -> None:
    """Queue ``items`` and run the loop on a thread for about ``seconds``
    more (with ``until``: until it holds, at most a minute) before asking it
    to exit (unless an item ends it)."""
    for item in items:
        out.queue.put(item)
    thread = threading.Thread(target=out.run, daemon=True)
    thread.start()
    thread.join(seconds)
    deadline = time.monotonic() + 60
    while until is not None and not until() and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    out.queue.put(Exit())
    thread.join(60)
    assert not thread.is_alive()


def test_heartbeats_only_while_every_thread_lives():
    alive = [True]
    out, sent, _ = loop(healthy=lambda: alive[0])
    run(out, [], 0.2, until=lambda: sum(isinstance(m, Heartbeat) for m in sent) >= 3)  # however slow the machine
    beats = [m.stats.heartbeat_seq for m in sent if isinstance(m, Heartbeat)]
    assert len(beats) >= 3 and beats == list(range(1, len(beats) + 1))  # numbered, so a reader sees a fresh one
    alive[0] = False
    sent.clear()
    run(out, [], 0.2)
    assert sent == []


def test_fail_all_ends_each_running_request_once():
    out, sent, _ = loop(interval=60)
    fail = FailAll("the model worker failed; retry the request")
    run(
        out,
        [
            Started("a", 2, 5, 0, []),
            Started("b", 1, 3, 0, []),
            Started("done", 1, 3, 0, []),
            TokenStep(1, [("a", 0, 0, None, None), ("b", 0, 1, None, None), ("done", 0, 2, "length", None)]),
            fail,
            TokenStep(2, [("a", 1, 1, None, None)]),  # after the failure: never sent
        ],
        5,
    )
    assert fail.done.is_set()
    steps = [m for m in sent if isinstance(m, StepOutputs)]
    assert [o.text for o in steps[0].outputs] == ["Hel", "lo", " wor"]
    ends = steps[-1].outputs
    assert sorted(o.request_id for o in ends) == ["a", "b"]
    assert all(o.finish_reason == "error" and o.error_kind == "internal" for o in ends)
    assert [o.completion_tokens for o in sorted(ends, key=lambda o: o.request_id)] == [1, 1]
    assert len(steps) == 2


def test_fail_now_goes_ahead_of_a_backlog():
    """A dying worker's errors are sent ahead of the outputs still queued
    (under load the output thread lags the scheduler by many steps)."""
    out, sent, _ = loop(interval=60)
    out.queue.put(Started("a", 1, 5, 0, []))
    for step in range(1, 201):
        out.queue.put(TokenStep(step, [("a", 0, 0, None, None)]))
    fail = FailAll("the model worker failed; retry the request")
    out.fail_now(fail)
    thread = threading.Thread(target=out.run, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive() and fail.done.is_set()
    steps = [m for m in sent if isinstance(m, StepOutputs)]
    assert len(steps) == 1 and [o.finish_reason for o in steps[0].outputs] == ["error"]


def test_a_request_that_cannot_be_decoded_ends_alone():
    out, sent, commands = loop(interval=60)
    bad_token = 4
    run(
        out,
        [
            Started("bad", 1, 2, 0, []),
            Started("good", 1, 2, 0, []),
            TokenStep(1, [("bad", 0, bad_token, None, None), ("good", 0, 0, None, None)]),
            TokenStep(2, [("bad", 0, 1, None, None), ("good", 0, 1, "length", None)]),
        ],
        0.3,
    )
    first, second = (m.outputs for m in sent if isinstance(m, StepOutputs))
    assert [(o.request_id, o.finish_reason, o.error_kind) for o in first] == [
        ("bad", "error", "internal"),
        ("good", None, None),
    ]
    assert [(o.request_id, o.text, o.finish_reason) for o in second] == [("good", "lo", "length")]
    assert [c.request_ids for c in commands if isinstance(c, Abort)] == [["bad"]]


def test_blas_names_what_runs_matrix_products():
    assert blas_in_use(on_gpu=True) == ("metal" if sys.platform == "darwin" else "gpu")
    cpu = blas_in_use(on_gpu=False)
    assert cpu == "accelerate" if sys.platform == "darwin" else cpu in ("openblas", "builtin", "unknown")
