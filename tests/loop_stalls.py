"""The event-loop stall check: a test fails when a gateway's event loop
stalled for more than 100 ms while it ran.

A pytest plugin (``pytest_plugins`` in ``tests/conftest.py``), active in
every run:

- At start it points :data:`gateway.metrics.loop_probe.ENV` at a fresh directory
  in this process's environment, so every gateway and node the tests start
  (``mlxd serve``, ``mlxd node``: they inherit it) runs the probe of
  :mod:`gateway.metrics.loop_probe` and writes its late windows there.
  Each test process has a directory of its own (under pytest-xdist, a
  sub-directory per worker of the controller's), so a gateway's stall is
  only ever charged to a test of the process that started it.
- In-process gateways (the route tests of ``tests/unit``, served over
  ASGI on the test's own loop) are probed too: every ``anyio`` test
  function runs with a probe on its loop. That loop also runs the test's
  own client (an SDK building its models on first use, say), so there a
  stall counts only when the loop was in the gateway's code
  (``gateway_frame``), and only for its time outside garbage collections
  (``gc_ms``): a collection there walks the test process's heap (the
  models, tokenizers and objects of every test before), not a gateway's
  (one took a second, half of it waiting for a CPU, on a loaded machine).
  The others are counted in the summary.
- After each test's call and again after its teardown (where module and
  session gateways are stopped), the records written since the last check
  are read. A record the probe blamed on the loop (``stall``) fails the
  test: the call phase when the test passed so far, else its teardown (an
  error at teardown). The message names the process, the blamed time and
  its parts, the innermost frames seen while the loop was late and, when
  the stall began before this test, the test during which it began.
- Late windows the probe excused (the process waited for a CPU or the
  host stole it) do not fail anything; the terminal summary counts them.

Why that rule and not plain lateness: see :mod:`gateway.metrics.loop_probe`.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gateway.metrics.loop_probe import ENV, LIMIT, LoopProbe


@dataclass
class _StallLog:
    """The records under one directory, read incrementally."""

    directory: Path
    offsets: dict[Path, int] = field(default_factory=dict)

    def read_new(self) -> list[dict[str, Any]]:
        """Every complete record appended since the last call."""
        records = []
        for path in sorted(self.directory.rglob("*.jsonl")):  # the controller's: every worker's
            start = self.offsets.get(path, 0)
            with path.open("rb") as f:
                f.seek(start)
                data = f.read()
            end = data.rfind(b"\n") + 1
            self.offsets[path] = start + end
            records += [json.loads(line) for line in data[:end].splitlines() if line.strip()]
        return records


@dataclass
class _State:
    """What the plugin keeps over the session."""

    log: _StallLog
    owned: bool
    excused: list[dict[str, Any]] = field(default_factory=list)
    outside: list[dict[str, Any]] = field(default_factory=list)
    stalls: int = 0
    windows: list[tuple[str, float, float]] = field(default_factory=list)
    current: tuple[str, float] | None = None


_KEY = pytest.StashKey[_State]()


def pytest_configure(config: pytest.Config) -> None:
    """Point every gateway this process's tests start at a record directory
    of this process's own."""
    given = os.environ.get(ENV)
    directory = Path(given) if given else Path(tempfile.mkdtemp(prefix="mlxd-loop-stalls-"))
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:  # the controller's directory came with the environment: one below it per worker
        directory = directory / worker
    directory.mkdir(parents=True, exist_ok=True)
    os.environ[ENV] = str(directory)
    state = _State(_StallLog(directory), owned=not given)
    state.log.read_new()  # a given directory may hold records of an earlier run
    config.stash[_KEY] = state


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the record directory this plugin made."""
    state = config.stash.get(_KEY, None)
    if state is not None and state.owned:
        shutil.rmtree(state.log.directory, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Note when each test runs, to name the test a late record began in."""
    state = item.config.stash[_KEY]
    state.current = (item.nodeid, time.time())
    yield
    state.windows.append((item.nodeid, state.current[1], time.time()))
    state.current = None


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    """Run an ``anyio`` test function with a probe on its own event loop
    (where in-process gateways serve)."""
    original = pyfuncitem.obj
    if pyfuncitem.get_closest_marker("anyio") is None or not inspect.iscoroutinefunction(original):
        yield
        return
    directory = pyfuncitem.config.stash[_KEY].log.directory

    @functools.wraps(original)
    async def probed(*args: Any, **kwargs: Any) -> Any:
        probe = LoopProbe(directory / f"in-process-{os.getpid()}.jsonl", "in-process")
        probe.start()
        try:
            return await original(*args, **kwargs)
        finally:
            probe.stop()

    pyfuncitem.obj = probed
    try:
        yield
    finally:
        pyfuncitem.obj = original


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Fail the test (or its teardown) when a loop stall was recorded since
    the last check."""
    outcome = yield
    if call.when == "setup":
        return
    report: pytest.TestReport = outcome.get_result()
    state = item.config.stash[_KEY]
    records = state.log.read_new()
    state.excused += [r for r in records if not r["stall"]]
    state.outside += [r for r in records if r["stall"] and not _counts(r)]
    stalls = [r for r in records if _counts(r)]
    if not stalls:
        return
    state.stalls += len(stalls)
    text = "\n\n".join(_describe(r, state) for r in stalls)
    header = f"the event loop stalled for more than {LIMIT * 1000:.0f} ms ({len(stalls)} time(s))"
    if report.passed:
        report.outcome = "failed"
        report.longrepr = f"{header}:\n\n{text}"
    else:
        report.sections.append(("event-loop stalls", f"{header}:\n\n{text}"))


def _counts(record: dict[str, Any]) -> bool:
    """Whether ``record`` is a stall of a gateway's loop (on a loop shared
    with a test's client, only one met in the gateway's code, for its time
    outside garbage collections; see the module docstring)."""
    if not record["stall"]:
        return False
    if record["role"] != "in-process":
        return True
    return record.get("gateway_frame") is not None and record["blamed_ms"] - record["gc_ms"] > LIMIT * 1000


def _describe(record: dict[str, Any], state: _State) -> str:
    """One stall, for a failure message."""
    r = record
    parts = (
        f"{r['role']} pid {r['pid']}: blamed {r['blamed_ms']:.0f} ms of {r['lateness_ms']:.0f} ms late (rule {r['rule']})"
        f"\n  the loop's thread: on a CPU {r['cpu_ms']:.0f} ms (collecting garbage {r['gc_ms']:.0f} ms),"
        f" waiting for one {r['runq_ms']:.0f} ms"
        f"\n  other Python threads (the most one did): waiting for a CPU {r['others_runq_ms']:.0f} ms,"
        f" on one {r['others_cpu_ms']:.0f} ms; collecting garbage {r['others_gc_ms']:.0f} ms"
        f"\n  taken by the host: {r['host_ms']:.0f} ms ({r['steal_ms']:.0f} ms reported as steal;"
        f" {r['cpu_stolen_ms']:.0f} ms of it excused from the loop's CPU time)"
    )
    began = _began_in(r["at"], state)
    if began is not None:
        parts += f"\n  began during {began}"
    stack = r.get("stack") or ["(no stack sampled)"]
    return parts + "\n  where the loop was, innermost last:\n    " + "\n    ".join(stack)


def _began_in(at: float, state: _State) -> str | None:
    """The earlier test during which Unix time ``at`` fell (None: the
    current test, or between tests)."""
    if state.current is not None and at >= state.current[1]:
        return None
    return next((name for name, start, end in reversed(state.windows) if start <= at <= end), "(between tests)")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Say how many stalls of gateway loops were recorded (each failed the
    test that was running) and how many late windows were excused as the
    machine's (under xdist the controller says it for every worker)."""
    state = config.stash.get(_KEY, None)
    if state is None:
        return
    records = state.log.read_new()
    state.excused += [r for r in records if not r["stall"]]
    state.outside += [r for r in records if r["stall"] and not _counts(r)]
    state.stalls += sum(1 for r in records if _counts(r))  # under xdist, the controller reads its workers' here
    if not state.excused and not state.stalls and not state.outside:
        return
    worst = max((r["lateness_ms"] for r in state.excused), default=0.0)
    terminalreporter.write_line(
        f"event-loop probe: {state.stalls} stall(s) of gateway loops; {len(state.excused)} late window(s)"
        f" excused as the machine's (waiting for a CPU or stolen; worst {worst:.0f} ms late);"
        f" {len(state.outside)} stall(s) of in-process loops outside the gateway's code (test clients)"
        " or in the test process's garbage collections"
    )
