"""An opt-in probe that records when the gateway's event loop stalls.

The gateway must never block its event loop (invariant 8 of
``docs/agents.md``). With the environment variable :data:`ENV` naming a
directory, :func:`start_probe` (called by ``mlxd serve`` and ``mlxd node``
as their loop starts) watches the loop and appends one JSON line per stall
to ``<directory>/<role>-<pid>.jsonl``; the test suite sets it for every
gateway it starts and fails a test during which a stall was recorded
(``tests/loop_stalls.py``). Unset (production), nothing runs.

How a stall is measured, and blamed:

- A timer callback runs every :data:`TICK` seconds on the loop. Its
  *lateness* (how much later than due it ran) bounds any stretch the loop
  spent without returning to its selector: a callback blocking for ``D``
  seconds makes the next tick at least ``D - TICK`` late. The clock is read
  on both sides of the tick's own counter reads and a window runs from
  the end of one tick's reads to the start of the next one's, so time the
  probe spends reading ``/proc`` (or waiting for the GIL after that read)
  is never the loop's lateness.
- Lateness alone cannot tell a blocking call from a machine too busy to
  run the process. On Linux each tick also reads the loop thread's
  scheduler counters (``/proc/self/task/<tid>/schedstat``: time on a CPU,
  time runnable but waiting for one), and a watcher thread samples the
  same counters of the process's other Python threads and the virtual
  machine's per-CPU times (``/proc/stat``): what the host *took* from each
  CPU is the wall time less what the guest's kernel accounted to it
  (user, system, idle and the rest), which holds the *steal* the host
  reports and the time it took without reporting it. A window more than
  :data:`LIMIT` late is judged by splitting its
  lateness into the loop thread's time on a CPU, its time waiting for one
  and the rest, when it was asleep. The loop is blamed for

  - all its CPU time, less what the host took: it was running callbacks
    (the guest may charge time the host took to the thread that was
    running; see below);
  - its sleep (a ``time.sleep``, a file read, a DNS lookup, a wait for a
    child process, the GIL held by a thread that computes), less what
    the machine explains: the longest wait for a CPU of another Python
    thread (the loop sleeps on one when it holds the GIL and is
    preempted, or when it must run before ``Thread.start`` returns, as
    ``asyncio.to_thread`` starts its pool's threads; threads without
    Python code, such as ZeroMQ's, never hold the loop and are left out),
    and the rest of what the host took from the CPU that lost most, up to
    :data:`STOLEN_PER_CPU` times the loop thread's CPU time (a thread
    asleep in a blocking call is not excused by a busy host);
  - not its wait for a CPU: a free machine would have run it.

  Above :data:`LIMIT` it is a stall when the loop was running the
  project's own code: either its thread spent more than :data:`LIMIT` on a
  CPU in the window (work that no busy machine explains), or the stack
  the watcher sampled most often while the loop was late is inside a
  callback the loop ran, in a frame of this project other than the
  probe's (:func:`_own_frame`). A loop idle in its selector, or inside
  the probe's own tick, is never blamed; nor is one whose stack no look
  caught (a starved watcher) unless its CPU time alone is a stall. A late
  window excused either way is recorded too, with ``"stall": false``.
  Only time the host took is excused from CPU time, so a busy callback is
  caught however loaded the guest is; the excuses can hide up to what the
  host took of a stall (about 100 ms per freeze, see below) and part of
  a sleeping stall while other Python threads wait for a CPU (the
  watcher's own waits, a few milliseconds per look).

  Why CPU time is not taken at its word: measured on the CI machine (a
  KVM guest, 2 vCPUs, whose host takes its vCPUs about 100 ms at a time
  when busy), a thread that never stops spinning showed such freezes as
  sleep in most cases, as run-queue wait in some and as 88-100 ms of its
  own CPU time in 5 of 55 gaps over 80 ms in 11 minutes; ``/proc/stat``'s
  steal column reported some freezes, on the CPU concerned or the other
  one, and missed others (3 of those 5), while the wall time less the
  guest's accounted time showed each freeze of the 4 minutes that
  measured it, reported or not (to within the 10 ms units of
  ``/proc/stat``: 20-30 ms in a window the host left alone, which the rule
  excuses in the loop's favour).
  Five CI stall reports of 100-105 ms of loop CPU time each came with
  100 ms the host took.
- Elsewhere (no ``/proc``) only CPU time can be attributed: the blamed
  time is the loop thread's CPU time over the window
  (:func:`time.thread_time`), so a busy loop is caught but a sleeping call
  is not.
- While the loop is late, the watcher samples the loop thread's Python
  stack every :data:`STACK_EVERY` seconds; the record names the
  innermost frames seen most often (the handler and the call that
  blocked), and the garbage collections and other threads' CPU time in
  the window.

asyncio's own slow-callback report (debug mode with
``slow_callback_duration``) is not used: debug mode records a traceback at
every ``call_soon`` and checks every coroutine (measured: 100,000 loop
steps cost 2.6 s of CPU in debug mode, 0.09 s without, and the same with
this probe, whose own cost is about 1.4% of a core while idle), and it
cannot tell a starved process from a blocked loop.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

ENV = "MLXD_LOOP_STALL_LOG"
"""The environment variable naming the directory stall records go to;
unset or empty: no probe."""

TICK = 0.01
"""Seconds between the probe's timer callbacks: a blocking stretch of
``LIMIT + TICK`` or more is always seen as at least ``LIMIT`` late."""

LIMIT = 0.1
"""A window whose blamed time exceeds this many seconds is a stall."""

SAMPLE_EVERY = 0.05
"""Seconds between the watcher thread's samples of the machine (per-CPU
times, the other threads' run-queue waits) and its looks at the loop."""

STACK_EVERY = 0.05
"""Seconds between the watcher's samples of the loop thread's stack while
the loop is late (no more often than its other looks: each wake-up of the
watcher on a busy machine is a wait for a CPU, which excuses a sleeping
stall)."""

LATE_LOOK = 0.03
"""Seconds past a tick's due time after which the watcher counts the loop
as late and samples its stack."""

FRAMES = 40
"""Innermost stack frames kept per sample (import machinery left out)."""

STOLEN_PER_CPU = 19
"""The most of the time the host took excused from the loop's sleep per
second of CPU time its thread got in a window (the host taking up to 95%
of a CPU): see the module docstring."""

HISTORY = 1024
"""Watcher samples kept (about 50 s at :data:`SAMPLE_EVERY`)."""


@dataclass
class _Window:
    """The counters at the start of a tick window: ``wall`` is the
    monotonic time once they were read (the window's start), ``read_at``
    the time just before the read."""

    wall: float
    read_at: float
    cpu_ns: int
    runq_ns: int
    gc_ns: int
    others_gc_ns: int


@dataclass
class _Samples:
    """Stacks of the loop thread seen during one late window."""

    epoch: float
    stacks: collections.Counter[Frames] = field(default_factory=collections.Counter)


class _SchedStat:
    """The scheduler counters of one thread (Linux): nanoseconds on a CPU
    and waiting on a run queue, from ``/proc/self/task/<tid>/schedstat``."""

    def __init__(self, tid: int) -> None:
        self._fd = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)

    def read(self) -> tuple[int, int]:
        """``(cpu_ns, runq_ns)`` so far."""
        fields = os.pread(self._fd, 128, 0).split()
        return int(fields[0]), int(fields[1])

    def close(self) -> None:
        """Release the file."""
        os.close(self._fd)


@dataclass(frozen=True)
class _CpuTimes:
    """Per CPU, from ``/proc/stat`` (nanoseconds so far): ``accounted``,
    the time the guest's kernel saw the CPU do anything (user, nice,
    system, idle, iowait, irq and softirq), and ``steal``, what the host
    reported taking."""

    accounted: list[int]
    steal: list[int]


def _cpu_times() -> _CpuTimes | None:
    """The per-CPU times now (None when ``/proc/stat`` is unreadable or
    reports no steal column)."""
    try:
        with open("/proc/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    accounted, steal = [], []
    for line in text.splitlines():
        if line.startswith(b"cpu") and not line.startswith(b"cpu "):
            fields = line.split()
            if len(fields) > 8:
                accounted.append(sum(int(v) for v in fields[1:8]) * tick_ns)
                steal.append(int(fields[8]) * tick_ns)
    return _CpuTimes(accounted, steal) if steal else None


def _host_taken(before: _CpuTimes | None, after: _CpuTimes | None, seconds: float) -> tuple[float, float]:
    """Over ``seconds`` of wall time between two samples: the steal the
    host reported and the time it took, reported or not (wall time less
    what the guest accounted), each on the CPU that lost most, in seconds;
    zeros when either sample is missing or the CPUs changed."""
    if before is None or after is None or len(before.steal) != len(after.steal):
        return 0.0, 0.0
    steal = max(b - a for a, b in zip(before.steal, after.steal)) / 1e9
    accounted = [b - a for a, b in zip(before.accounted, after.accounted)]
    taken = max(seconds - seen / 1e9 for seen in accounted)
    return max(0.0, steal), max(0.0, steal, taken)


def _python_threads(skip: set[int]) -> list[int]:
    """Native ids of this process's Python threads but those in ``skip``:
    the threads that can hold the GIL, or whose start a caller waits for
    (a thread that has not run yet has no id and cannot be read)."""
    return [t.native_id for t in threading.enumerate() if t.native_id is not None and t.native_id not in skip]


def _sched_by_thread(tids: list[int]) -> dict[int, tuple[int, int]]:
    """``(cpu_ns, runq_ns)`` so far of each of threads ``tids`` of this
    process (time on a CPU, time waiting for one), from
    ``/proc/self/task/<tid>/schedstat``; a thread that ended meanwhile is
    left out."""
    found = {}
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
                fields = f.read().split()
            found[tid] = int(fields[0]), int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    return found


@dataclass
class _Machine:
    """What the watcher thread samples: when, the per-CPU times, and the
    CPU time and run-queue wait (ns) of each other Python thread."""

    at: float
    cpus: _CpuTimes | None
    threads: dict[int, tuple[int, int]]


Frames = tuple[tuple[str, int, str], ...]
"""A sampled stack, innermost first: ``(file, line, function)`` per frame."""


def _frames(frame: FrameType | None) -> Frames:
    """The raw stack from ``frame`` outwards (cheap: the watcher takes it
    holding the GIL; :func:`_describe` formats it later)."""
    found = []
    while frame is not None:
        code = frame.f_code
        found.append((code.co_filename, frame.f_lineno, code.co_name))
        frame = frame.f_back
    return tuple(found)


PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
"""The folder holding the ``gateway`` package: a frame in a file under it
(not in an installed library) is this project's code."""

GATEWAY_DIR = PROJECT_DIR + "gateway" + os.sep
"""Where the gateway's own modules are."""

PROBE_FILE = os.path.abspath(__file__)
"""This module (its frames are the probe's, not the gateway's)."""

_CALLBACK = (os.path.join("asyncio", "events.py"), "_run")
"""The frame in which an asyncio loop runs one callback (``Handle._run``):
frames inside it are the callback's; a stack without it is the loop in its
selector or its own bookkeeping."""


def _own_frame(frames: Frames) -> tuple[str, str] | None:
    """The innermost frame of ``frames`` (innermost first) that lies inside
    the callback the loop was running and in this project's own code (not
    a library's, not this probe's), as ``(absolute path, "path:line in
    function")``; None when there is none."""
    here = os.getcwd() + os.sep
    inside = []
    for frame in frames:
        if frame[0].endswith(_CALLBACK[0]) and frame[2] == _CALLBACK[1]:
            break
        inside.append(frame)
    else:
        return None  # no callback running: idle in the selector
    for path, line, name in inside:
        where = os.path.abspath(path)
        if where.startswith(PROJECT_DIR) and where != PROBE_FILE and f"{os.sep}site-packages{os.sep}" not in where:
            return where, f"{path.removeprefix(here)}:{line} in {name}"
    return None


def _describe(frames: Frames) -> list[str]:
    """The innermost :data:`FRAMES` of ``frames`` but the import
    machinery's, innermost last, as ``path:line in function`` (paths
    relative to the working directory when inside it)."""
    here = os.getcwd() + os.sep
    kept = [f for f in frames if not f[0].startswith("<frozen importlib")][:FRAMES]
    return [f"{path.removeprefix(here)}:{line} in {name}" for path, line, name in reversed(kept)]


@dataclass(frozen=True)
class Blame:
    """How much of a late window the loop is blamed for (seconds):
    ``blamed`` in all, ``cpu`` its CPU time counted as its own (the basis
    of a CPU-time stall) and ``cpu_stolen`` the part of its CPU time
    excused as time the host took."""

    blamed: float
    cpu: float
    cpu_stolen: float


def judge_schedstat(lateness: float, cpu: float, runq: float, others: float, taken: float) -> Blame:
    """Blame a window ``lateness`` seconds late in which the loop's thread
    was on a CPU ``cpu`` seconds and waited for one ``runq`` seconds,
    another Python thread waited for a CPU ``others`` seconds and the host
    took ``taken`` seconds from the CPU that lost most (the rule of the
    module docstring). Each second the host took is excused once: first
    from the CPU time (the guest may charge it to the thread that was
    running), the rest from the time asleep, up to :data:`STOLEN_PER_CPU`
    times the thread's CPU time."""
    cpu_stolen = min(cpu, taken)
    own_cpu = cpu - cpu_stolen
    asleep = max(0.0, lateness - runq - cpu)
    excused = others + min(taken - cpu_stolen, cpu * STOLEN_PER_CPU)
    return Blame(min(lateness, own_cpu) + max(0.0, asleep - excused), own_cpu, cpu_stolen)


class LoopProbe:
    """Watches the running loop it is started on and writes one JSON line
    per late window to ``path`` (see the module docstring for the rule).

    Start and stop it on the loop's thread. A record has ``role``,
    ``pid``, ``at`` (Unix time the window began), ``lateness_ms``,
    ``cpu_ms`` and ``runq_ms`` (the loop thread's), ``gc_ms`` (wall time
    the loop's thread spent in garbage collections; ``others_gc_ms``: other
    threads, which hold the GIL meanwhile), ``others_runq_ms``,
    ``others_cpu_ms`` (the most CPU time another Python thread used: one
    that held the GIL meanwhile is not excused, but this names it),
    ``steal_ms`` (reported by the host), ``host_ms`` (taken by the host,
    reported or not), ``cpu_stolen_ms`` (the part of ``cpu_ms`` excused as
    the host's), ``blamed_ms``, ``stall``
    (blamed above :data:`LIMIT` while running the project's code, see the
    module docstring), ``rule`` (``schedstat`` or ``thread_time``),
    ``stack`` (the innermost frames sampled most often while the loop
    was late, innermost last; empty when none was taken), ``own_frame``
    (the innermost of those frames inside the running callback in this
    project's own code, or None: the loop was idle, in a library or in
    the probe, or no stack was sampled) and ``gateway_frame`` (the same
    frame when it is in the gateway package, else None: e.g. a test's
    client sharing the loop).
    """

    def __init__(self, path: Path, role: str) -> None:
        self.path = path
        self.role = role
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._fd: int | None = None
        self._sched: _SchedStat | None = None
        self._window: _Window | None = None
        self._loop_ident = 0
        self._samples = _Samples(epoch=0.0)
        self._samples_lock = threading.Lock()  # the watcher counts stacks while the loop reads them
        self._history: collections.deque[_Machine] = collections.deque(maxlen=HISTORY)
        self._loop_tid = 0
        self._gc_ns = 0  # time the loop's thread spent collecting garbage
        self._others_gc_ns = 0  # time other threads did (holding the GIL the loop needs)
        self._gc_started: dict[int, int] = {}
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    def start(self) -> None:
        """Start watching the running loop (timer callback and watcher
        thread)."""
        self._loop = asyncio.get_running_loop()
        self._loop_ident = threading.get_ident()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._loop_tid = threading.get_native_id()
        try:
            self._sched = _SchedStat(self._loop_tid)
        except OSError:
            self._sched = None
        self._watcher = threading.Thread(target=self._watch, name="mlxd-loop-probe", daemon=True)
        self._watcher.start()
        if self._sched is not None:
            self._history.append(self._machine())
        gc.callbacks.append(self._on_gc)
        self._window = self._counters()
        self._timer = self._loop.call_later(TICK, self._tick)

    def stop(self) -> None:
        """Judge the window still open (a stall just before the stop, or
        code that never let the timer run), then stop watching and close
        the record file (idempotent)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._check()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()
            self._watcher = None
        if self._sched is not None:
            self._sched.close()
            self._sched = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- on the loop --------------------------------------------------------------------

    def _counters(self) -> _Window:
        """The counters now, with the clock read on both sides."""
        before = time.monotonic()
        if self._sched is not None:
            cpu, runq = self._sched.read()
        else:
            cpu, runq = time.thread_time_ns(), 0
        return _Window(time.monotonic(), before, cpu, runq, self._gc_ns, self._others_gc_ns)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        """Time the garbage collections, on the loop's thread and on others."""
        thread = threading.get_ident()
        if phase == "start":
            self._gc_started[thread] = time.perf_counter_ns()
            return
        started = self._gc_started.pop(thread, None)
        if started is None:
            return
        if thread == self._loop_ident:
            self._gc_ns += time.perf_counter_ns() - started
        else:
            self._others_gc_ns += time.perf_counter_ns() - started

    def _tick(self) -> None:
        assert self._loop is not None
        try:
            self._check()
        finally:  # a failed judgement must not end the watching: the next window would never close
            self._timer = self._loop.call_later(TICK, self._tick)

    def _check(self) -> None:
        """Judge the window since the last tick if it is late, and open the
        next one."""
        assert self._window is not None
        now = self._counters()
        start = self._window
        lateness = now.read_at - start.wall - TICK
        if lateness > LIMIT:
            self._judge(start, now, lateness)
        self._window = now

    def _judge(self, start: _Window, end: _Window, lateness: float) -> None:
        cpu = (end.cpu_ns - start.cpu_ns) / 1e9
        if self._sched is not None:
            runq = (end.runq_ns - start.runq_ns) / 1e9
            others, others_cpu, steal, taken = self._machine_since(start.wall)
            blame = judge_schedstat(lateness, cpu, runq, others, taken)
            rule = "schedstat"
        else:
            runq = others = others_cpu = steal = taken = 0.0
            blame = Blame(min(lateness, cpu), cpu, 0.0)
            rule = "thread_time"
        blamed = blame.blamed
        with self._samples_lock:
            samples = self._samples
            frames = samples.stacks.most_common(1)[0][0] if samples.epoch == start.wall and samples.stacks else ()
        own = _own_frame(frames)
        record = {
            "role": self.role,
            "pid": os.getpid(),
            "at": round(time.time() - (end.wall - start.wall), 3),
            "lateness_ms": round(lateness * 1e3, 1),
            "cpu_ms": round(cpu * 1e3, 1),
            "cpu_stolen_ms": round(blame.cpu_stolen * 1e3, 1),
            "gc_ms": round((end.gc_ns - start.gc_ns) / 1e6, 1),
            "others_gc_ms": round((end.others_gc_ns - start.others_gc_ns) / 1e6, 1),
            "runq_ms": round(runq * 1e3, 1),
            "others_runq_ms": round(others * 1e3, 1),
            "others_cpu_ms": round(others_cpu * 1e3, 1),
            "steal_ms": round(steal * 1e3, 1),
            "host_ms": round(taken * 1e3, 1),
            "blamed_ms": round(blamed * 1e3, 1),
            "stall": blamed > LIMIT and (blame.cpu > LIMIT or own is not None),
            "rule": rule,
            "stack": _describe(frames),
            "own_frame": own[1] if own else None,
            "gateway_frame": own[1] if own and own[0].startswith(GATEWAY_DIR) else None,
        }
        if self._fd is not None:
            os.write(self._fd, (json.dumps(record) + "\n").encode())

    def _machine_since(self, begin: float) -> tuple[float, float, float, float]:
        """From the last watcher sample at or before monotonic time
        ``begin`` until now (a window a little wider than the late one):
        the seconds another Python thread of this process waited for a CPU
        and the seconds one ran (the most any one did), and the seconds
        of steal the host reported and that it took, reported or not (on
        the CPU that lost the most; :func:`_host_taken`)."""
        history = list(self._history)
        before = next((m for m in reversed(history) if m.at <= begin), history[0])
        now = self._machine()
        was = {tid: before.threads.get(tid, (0, 0)) for tid in now.threads}
        others = max([0, *(runq - was[tid][1] for tid, (_, runq) in now.threads.items())])
        others_cpu = max([0, *(cpu - was[tid][0] for tid, (cpu, _) in now.threads.items())]) / 1e9
        steal, taken = _host_taken(before.cpus, now.cpus, now.at - before.at)
        return others / 1e9, others_cpu, steal, taken

    def _machine(self) -> _Machine:
        """The per-CPU times and other threads' scheduler counters now."""
        skip = {self._loop_tid}
        cpus = _cpu_times()
        return _Machine(time.monotonic(), cpus, _sched_by_thread(_python_threads(skip)))

    # -- on the watcher thread ----------------------------------------------------------

    def _watch(self) -> None:
        """Sample the machine every :data:`SAMPLE_EVERY` seconds and, while
        the loop is late, its thread's stack every :data:`STACK_EVERY`.
        """
        wait = SAMPLE_EVERY
        while not self._stop.wait(wait):
            wait = self._look()

    def _look(self) -> float:
        """One look (see :meth:`_watch`); returns the seconds until the next."""
        now = time.monotonic()
        if self._sched is not None and (not self._history or now - self._history[-1].at >= SAMPLE_EVERY):
            self._history.append(self._machine())
        window = self._window
        if window is None or now - window.wall < TICK + LATE_LOOK:
            return SAMPLE_EVERY
        frame = sys._current_frames().get(self._loop_ident)
        frames = _frames(frame)
        del frame
        with self._samples_lock:
            if self._samples.epoch != window.wall:
                self._samples = _Samples(epoch=window.wall)
            self._samples.stacks[frames] += 1
        return STACK_EVERY


def start_probe(role: str) -> LoopProbe | None:
    """Start a :class:`LoopProbe` on the running loop when :data:`ENV`
    names a directory (records go to ``<directory>/<role>-<pid>.jsonl``);
    None otherwise. Call :meth:`LoopProbe.stop` before the loop closes."""
    directory = os.environ.get(ENV)
    if not directory:
        return None
    probe = LoopProbe(Path(directory) / f"{role}-{os.getpid()}.jsonl", role)
    probe.start()
    return probe
