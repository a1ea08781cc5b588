"""The shared loop of the non-generating kinds (:mod:`worker.batch_loop.loop`)
with a fake kind (no MLX): every admitted request gets exactly one terminal
output, on its answer, an abort, a deadline, shutdown or a failing step, and
leaves the loop's records when it ends."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from shared.protocol import StepOutputs
from worker.batch_loop.loop import BatchLoop
from worker.messages import Abort, Stop


@dataclass
class Job:
    request_id: str
    steps: int
    deadline: float | None = None


@dataclass
class Live:
    job: Job
    done: int = 0


class Fake(BatchLoop[Live]):
    """One step a turn for the request at the front; ``fail`` raises."""

    job_type = Job
    name = "fake"
    work = "faking"
    fail = False

    def _open(self, job: Job) -> Live:
        return Live(job)

    def _step(self) -> None:
        if self.fail:
            raise RuntimeError("boom")
        request_id, live = next(iter(self._live.items()))
        live.done += 1
        if live.done == live.job.steps:
            del self._live[request_id]
            self._emit(("done", request_id))
        time.sleep(0.01)


def _terminals(emitted: list[object]) -> dict[str, list[str]]:
    ends: dict[str, list[str]] = {}
    for item in emitted:
        if isinstance(item, tuple):
            ends.setdefault(item[1], []).append("stop")
        else:
            assert isinstance(item, StepOutputs)
            for output in item.outputs:
                ends.setdefault(output.request_id, []).append(output.error_kind or output.finish_reason)
    return ends


def test_each_request_ends_once_on_answer_abort_deadline_and_stop():
    emitted: list[object] = []
    loop = Fake(object(), emitted.append)
    loop.submit(Job("a", 1))
    loop.submit(Job("a", 1))  # duplicate: dropped
    loop.submit(Job("b", 10_000))
    loop.submit(Job("c", 10_000, deadline=time.monotonic() + 0.05))
    loop.submit(Job("d", 10_000))
    thread = threading.Thread(target=loop.run)
    thread.start()
    time.sleep(0.3)
    loop.submit(Abort(["b", "nope"]))
    time.sleep(0.1)
    loop.submit(Stop())
    thread.join(5)
    assert not thread.is_alive()
    assert _terminals(emitted) == {"a": ["stop"], "b": ["abort"], "c": ["timeout"], "d": ["abort"]}
    assert not loop._live
    assert loop.counters.requests_aborted == 2 and loop.counters.requests_timed_out == 1


def test_a_failing_step_ends_every_request_and_propagates():
    emitted: list[object] = []
    loop = Fake(object(), emitted.append)
    loop.fail = True
    loop.submit(Job("a", 3))
    loop.submit(Job("b", 3))
    with pytest.raises(RuntimeError):
        loop.run()
    assert _terminals(emitted) == {"a": ["internal"], "b": ["internal"]}
    assert emitted[-1].outputs[0].error == "the model worker failed while faking; retry"  # type: ignore[union-attr]
    assert not loop._live
