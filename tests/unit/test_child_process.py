"""Child processes started off the event loop (gateway/workers/child_process.py):
exit statuses, kill, a cancelled start that leaves no process behind, and
the thread-based wait used where there are no pid file descriptors."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest

from gateway.workers import child_process
from gateway.workers.child_process import spawn

ENV = dict(os.environ)


def python(code: str) -> list[str]:
    """The command running ``code`` in this interpreter."""
    return [sys.executable, "-c", code]


@pytest.fixture(params=["pidfd", "thread"])
def waiting(request, monkeypatch):
    """Each way of waiting for a child: a pid file descriptor, or a thread
    (as where ``os.pidfd_open`` is missing)."""
    if request.param == "thread":
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("no pid file descriptors here")
    return request.param


def test_wait_returns_the_exit_status(waiting):
    async def run() -> tuple[int | None, int, int | None]:
        proc = await spawn(python("import sys; sys.exit(3)"), ENV)
        before = proc.returncode
        return before, await asyncio.wait_for(proc.wait(), 30), proc.returncode

    before, status, after = asyncio.run(run())
    assert before in (None, 3) and status == 3 and after == 3


def test_kill_ends_it_and_a_second_kill_is_harmless(waiting):
    async def run() -> int:
        proc = await spawn(python("import time; time.sleep(60)"), ENV)
        proc.kill()
        status = await asyncio.wait_for(proc.wait(), 30)
        proc.kill()
        proc.send_signal(signal.SIGTERM)
        return status

    assert asyncio.run(run()) == -signal.SIGKILL


def test_a_cancelled_start_leaves_no_process(monkeypatch):
    """Cancelled while the process is being started, the process is killed
    and reaped as soon as it exists."""
    started: list[child_process.ChildProcess] = []
    real = child_process.ChildProcess

    async def run() -> int:
        made = asyncio.Event()

        class Recorded(real):  # type: ignore[misc, valid-type]
            def __init__(self, *args, **kwargs) -> None:
                super().__init__(*args, **kwargs)
                started.append(self)
                made.set()

        monkeypatch.setattr(child_process, "ChildProcess", Recorded)
        task = asyncio.create_task(spawn(python("import time; time.sleep(60)"), ENV))
        await asyncio.sleep(0)  # the start is under way in a worker thread
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(made.wait(), 30)  # the start finished in its thread; the process was discarded
        return await asyncio.wait_for(started[0].wait(), 30)

    assert asyncio.run(run()) == -signal.SIGKILL
