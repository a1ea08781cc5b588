"""Scenarios for the event-loop stall probe, one per process:
``python -m tests.unit.loop_probe_scenarios SCENARIO RECORDS_FILE``.

Each runs an asyncio loop with a :class:`gateway.metrics.loop_probe.LoopProbe`
writing to ``RECORDS_FILE``, provokes one kind of late window, lets the
loop tick on for a moment and stops.

Stalls (the loop's fault):

- ``sleep``: a callback sleeps 0.25 s.
- ``slow_read``: a callback reads a pipe whose data comes 0.25 s later
  (a slow disk or network file system looks the same).
- ``busy``: a callback computes for 0.25 s of CPU time.

Not the loop's fault (no stall):

- ``slow_probe_read``: one of the probe's own reads of its counters takes
  0.25 s (as a read of ``/proc`` or the wait for the GIL after it can on a
  busy machine).

The machine's fault (excused): a process at real-time priority
(``SCHED_FIFO``) spins for :data:`SPIN_SECONDS` on one CPU, so nothing
else runs there:

- ``starved``: the loop's thread (alone) is on that CPU.
- ``gil``: the loop's thread is on another CPU (at real-time priority
  too, so it never waits for a CPU itself), but a Python thread on the
  spinner's CPU wakes the spinner while holding the GIL and is preempted
  with it, so the loop waits for that thread asleep (as it would for a
  thread it starts).

The spinning scenarios exit with :data:`NO_REAL_TIME` when real-time
priority is not allowed here. Linux only (affinity, ``/proc``).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import sys
import threading
import time
from pathlib import Path

from gateway.metrics.loop_probe import LoopProbe

SPIN_SECONDS = 0.4
"""How long the competing process spins."""

NO_REAL_TIME = 77
"""Exit status of a spinning scenario where real-time priority is refused."""

SPINNER = """
import os, sys, time
os.sched_setaffinity(0, {{{cpu}}})
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
except OSError:
    print("no-rt", flush=True)
    sys.exit(0)
print("ready", flush=True)
sys.stdin.readline()
start = time.perf_counter()
while time.perf_counter() - start < {seconds}:
    pass
"""


def blocking_handler() -> None:
    """Stands in for a handler that makes a blocking call."""
    time.sleep(0.25)


def slow_read_handler(fd: int) -> None:
    """Stands in for a handler that reads a slow file."""
    os.read(fd, 1)


def busy_handler() -> None:
    """Stands in for a handler that computes for long."""
    start = time.thread_time()
    while time.thread_time() - start < 0.25:
        pass


class Spinner:
    """A process at real-time priority on one CPU that spins for
    :data:`SPIN_SECONDS` once a byte arrives on :attr:`go` (a pipe)."""

    def __init__(self, proc: asyncio.subprocess.Process, go: int) -> None:
        self.proc = proc
        self.go = go

    @classmethod
    async def start(cls, cpu: int) -> Spinner:
        """Start it on ``cpu`` and wait until it is ready (without blocking
        the loop); exit with :data:`NO_REAL_TIME` when it may not have
        real-time priority."""
        read, go = os.pipe()
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            SPINNER.format(cpu=cpu, seconds=SPIN_SECONDS),
            stdin=read,
            stdout=asyncio.subprocess.PIPE,
        )
        os.close(read)
        assert proc.stdout is not None
        if await proc.stdout.readline() != b"ready\n":
            await proc.wait()
            raise SystemExit(NO_REAL_TIME)
        return cls(proc, go)

    async def spin(self) -> None:
        """Let it spin and wait for it to end, without blocking the loop."""
        os.write(self.go, b"go\n")
        await self.proc.wait()


def hold_the_gil(cpu: int, spinner: Spinner, running: threading.Event, done: threading.Event) -> None:
    """Move to ``cpu`` (the spinner's) at the normal policy and run Python
    code until ``done``; once ``running`` is set, wake the spinner from
    a C call that keeps the GIL, so this thread is preempted holding it."""
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    os.sched_setaffinity(0, {cpu})
    write = ctypes.PyDLL(None).write  # a PyDLL function keeps the GIL while it runs
    write.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t)
    running.set()
    write(spinner.go, b"go\n", 3)
    while not done.is_set():
        pass


async def run(scenario: str, records: Path, cpus: list[int]) -> None:
    """Run ``scenario`` on the running loop with a probe writing to
    ``records``; the spinner goes to the first of ``cpus``."""
    loop = asyncio.get_running_loop()
    probe = LoopProbe(records, "scenario")
    probe.start()
    await asyncio.sleep(0.1)
    if scenario == "sleep":
        loop.call_soon(blocking_handler)
    elif scenario == "slow_read":
        read, write = os.pipe()
        threading.Timer(0.25, os.write, (write, b"x")).start()
        loop.call_soon(slow_read_handler, read)
    elif scenario == "busy":
        loop.call_soon(busy_handler)
    elif scenario == "slow_probe_read":
        assert probe._sched is not None
        read = probe._sched.read
        slow = [True]

        def slow_once() -> tuple[int, int]:
            if slow.pop() if slow else False:
                time.sleep(0.25)
            return read()

        probe._sched.read = slow_once  # type: ignore[method-assign]
        await asyncio.sleep(0.1)
        assert not slow  # the slow read happened
    elif scenario == "starved":
        spinner = await Spinner.start(cpus[0])
        os.sched_setaffinity(0, {cpus[0]})  # the loop's thread only: no other thread waits with it
        await spinner.spin()
    elif scenario == "gil":
        spinner = await Spinner.start(cpus[0])
        try:  # the loop's thread never waits for a CPU itself: all its lateness is the GIL's
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        except OSError:
            raise SystemExit(NO_REAL_TIME) from None
        running, done = threading.Event(), threading.Event()
        threading.Thread(target=hold_the_gil, args=(cpus[0], spinner, running, done)).start()
        try:
            await spinner.proc.wait()
        finally:
            done.set()
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    await asyncio.sleep(0.3)
    probe.stop()


def main() -> None:
    """Run the scenario; for ``gil`` the loop's thread is on the last CPU
    (and the spinner on the first)."""
    scenario, records = sys.argv[1], Path(sys.argv[2])
    cpus = sorted(os.sched_getaffinity(0))
    if scenario == "gil":
        os.sched_setaffinity(0, {cpus[-1]})
    asyncio.run(run(scenario, records, cpus))


if __name__ == "__main__":
    main()
