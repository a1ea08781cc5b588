"""The event-loop stall probe (gateway/metrics/loop_probe.py): a blocking call, a
slow read and a busy callback on the loop are stalls, named by their
function; a loop that only waited for a CPU (its own thread, or a Python
thread holding the GIL) is excused. Each scenario runs in its own process
(tests/unit/loop_probe_scenarios.py). Linux only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit import loop_probe_scenarios

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the probe's full rule needs Linux")


SCENARIO_TRIES = 3
"""How often a spinning scenario is run until its spinner made the loop
late. Once in a while on a loaded machine it did not (no late window at
all: the scenario's own threads were not run as it planned); every check
of the probe applies, unchanged, to the run where it did."""


def records(scenario: str, tmp_path: Path) -> list[dict]:
    """The probe's records of one scenario run."""
    path = tmp_path / "records.jsonl"
    path.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "tests.unit.loop_probe_scenarios", scenario, str(path)], cwd=ROOT, timeout=60
    )
    if done.returncode == loop_probe_scenarios.NO_REAL_TIME:
        pytest.skip("real-time priority is not allowed here")
    assert done.returncode == 0
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize(
    ("scenario", "function"),
    [("sleep", "blocking_handler"), ("slow_read", "slow_read_handler"), ("busy", "busy_handler")],
)
def test_a_blocked_loop_is_a_stall_named_by_its_function(scenario, function, tmp_path):
    late = records(scenario, tmp_path)
    stalls = [r for r in late if r["stall"]]
    assert len(stalls) == 1, late
    (stall,) = stalls
    assert stall["rule"] == "schedstat" and stall["blamed_ms"] > 100
    assert stall["stack"][-1].endswith(f"in {function}"), stall["stack"]
    if scenario == "busy":
        assert stall["cpu_ms"] >= 240


def test_the_probes_own_slow_read_is_not_the_loops_lateness(tmp_path):
    late = records("slow_probe_read", tmp_path)
    assert not [r for r in late if r["stall"]], late


@pytest.mark.parametrize("scenario", ["starved", "gil"])
def test_waiting_for_a_cpu_is_excused(scenario, tmp_path):
    for _ in range(SCENARIO_TRIES):  # until the machine ran the scenario as planned: the spinner made the loop late
        late = records(scenario, tmp_path)
        spun = [r for r in late if r["lateness_ms"] >= loop_probe_scenarios.SPIN_SECONDS * 1000 * 0.8]
        if spun:
            break
    assert spun, late
    assert not [r for r in late if r["stall"]], late
    if scenario == "gil":  # excused by the other thread's wait: the loop's thread never waited for a CPU
        assert max(r["lateness_ms"] - r["runq_ms"] for r in spun) > 100, spun


def test_a_failed_judgement_does_not_end_the_watching(tmp_path):
    """A tick whose judgement raises (a race with the watcher's stack count
    once did: ``dictionary changed size during iteration``) still arms the
    next tick; before, the probe stopped ticking and judged everything up
    to the gateway's stop as one late window, a false stall."""
    import asyncio

    from gateway.metrics.loop_probe import TICK, LoopProbe

    checks: list[int] = []

    async def watch() -> None:
        probe = LoopProbe(tmp_path / "records.jsonl", "test")
        probe.start()
        judge = probe._check

        def failing_once() -> None:
            checks.append(1)
            if len(checks) == 1:
                raise RuntimeError("dictionary changed size during iteration")
            judge()

        probe._check = failing_once  # type: ignore[method-assign]
        try:
            while len(checks) < 3:
                await asyncio.sleep(TICK)
        finally:
            probe._check = judge  # type: ignore[method-assign]
            probe.stop()

    asyncio.run(asyncio.wait_for(watch(), timeout=500 * TICK))
    assert len(checks) >= 3


def test_time_the_host_took_is_excused_once_and_a_busy_callback_is_still_a_stall():
    """The judgement of a late window (no process needed). The figures of a
    CI failure: 220 ms late, the loop's thread 100.4 ms on a CPU and 125 ms
    waiting for one, the host taking 100 ms; on this VM a freeze of the
    vCPU can be charged to the running thread as CPU time, so that is no
    stall. A callback that computes 250 ms in a window where the host
    took 100 ms still is one, and what the host took is excused only once."""
    from gateway.metrics.loop_probe import LIMIT, judge_schedstat

    frozen = judge_schedstat(lateness=0.220, cpu=0.1004, runq=0.125, others=0.026, taken=0.100)
    assert frozen.cpu < LIMIT and frozen.blamed < LIMIT, frozen
    assert frozen.cpu_stolen == 0.100

    busy = judge_schedstat(lateness=0.360, cpu=0.250, runq=0.0, others=0.0, taken=0.100)
    assert busy.cpu > LIMIT and busy.blamed > LIMIT, busy

    unexplained = judge_schedstat(lateness=0.220, cpu=0.105, runq=0.110, others=0.0, taken=0.0)
    assert unexplained.cpu > LIMIT and unexplained.blamed > LIMIT, unexplained

    # 100 ms taken while the loop ran 60 ms and slept 150 ms: excused from the CPU time first,
    # the remaining 40 ms from the sleep, never twice
    once = judge_schedstat(lateness=0.210, cpu=0.060, runq=0.0, others=0.0, taken=0.100)
    assert once.cpu == 0.0 and abs(once.blamed - 0.110) < 1e-9, once


def test_the_host_took_what_the_guest_did_not_account_reported_or_not():
    """What the host took from a CPU is the wall time the guest's kernel did
    not account to it: reported as steal, or (seen on the CI machine: a
    freeze charged to a running thread with no steal reported) not."""
    from gateway.metrics.loop_probe import _cpu_times, _CpuTimes, _host_taken

    ms = 1_000_000
    before = _CpuTimes(accounted=[1000 * ms, 2000 * ms], steal=[50 * ms, 60 * ms])
    unreported = _CpuTimes(accounted=[1002 * ms, 2010 * ms], steal=[50 * ms, 60 * ms])
    assert _host_taken(before, unreported, 0.213) == pytest.approx((0.0, 0.211))
    reported = _CpuTimes(accounted=[1100 * ms, 2100 * ms], steal=[150 * ms, 60 * ms])
    assert _host_taken(before, reported, 0.2) == pytest.approx((0.1, 0.1))
    left_alone = _CpuTimes(accounted=[1200 * ms, 2200 * ms], steal=[50 * ms, 60 * ms])
    assert _host_taken(before, left_alone, 0.2) == pytest.approx((0.0, 0.0))
    assert _host_taken(before, None, 0.2) == (0.0, 0.0)

    now = _cpu_times()
    assert now is not None and len(now.accounted) == len(now.steal) >= 1
