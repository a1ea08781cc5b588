"""The stall check of the test suite (tests/loop_stalls.py), run on a small
suite of its own under pytest-xdist: a process whose loop blocks for
0.25 s fails the test that started it, and only that test; a test running
at the same time on the other pytest process is not charged for it. Linux
only (the probe's full rule)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the probe's full rule needs Linux")

CONFTEST = 'pytest_plugins = ["tests.loop_stalls"]\n'

STALLING = """
import os, subprocess, sys
from pathlib import Path

def test_starts_a_process_whose_loop_blocks():
    records = Path(os.environ["MLXD_LOOP_STALL_LOG"]) / f"gateway-{os.getpid()}.jsonl"
    subprocess.run([sys.executable, "-m", "tests.unit.loop_probe_scenarios", "sleep", str(records)],
                   cwd=os.environ["PROJECT"], timeout=60, check=True)
    (Path(os.environ["MARKS"]) / "stalled").touch()
"""

BYSTANDER = """
import os, time
from pathlib import Path

def test_runs_meanwhile_on_the_other_process():
    deadline = time.monotonic() + 60
    while not (Path(os.environ["MARKS"]) / "stalled").exists():
        assert time.monotonic() < deadline, "the other test never ran"
        time.sleep(0.05)
"""


def test_a_stall_fails_only_the_test_whose_process_stalled(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "test_stalling.py").write_text(STALLING)
    (suite / "test_bystander.py").write_text(BYSTANDER)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("MLXD_LOOP_STALL_LOG", "PYTEST_XDIST_WORKER")}
    env |= {"PROJECT": str(ROOT), "MARKS": str(marks), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist",
            "loadfile",
            "-rA",
            str(suite),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout + done.stderr
    assert "FAILED suite/test_stalling.py::test_starts_a_process_whose_loop_blocks" in out, out
    assert "the event loop stalled for more than 100 ms" in out and "blocking_handler" in out, out
    assert "PASSED suite/test_bystander.py::test_runs_meanwhile_on_the_other_process" in out, out
    assert "1 failed, 1 passed" in out, out


def test_an_in_process_stall_counts_only_outside_garbage_collections():
    """The record of the failed CI run of 40c8e32: an in-process loop in the
    gateway's code, 499 ms blamed, in a collection that took 1,003 ms (the
    test process's heap); the same without the collection counts, and a
    gateway process's collections are its own."""
    from tests.loop_stalls import _counts

    record = {"stall": True, "role": "in-process", "gateway_frame": "gateway/x.py:1", "blamed_ms": 499.0}
    assert not _counts({**record, "gc_ms": 1003.0})
    assert _counts({**record, "gc_ms": 0.0})
    assert _counts({**record, "gc_ms": 350.0})  # 149 ms outside the collection
    assert not _counts({**record, "gc_ms": 0.0, "gateway_frame": None})  # a test client's stall
    assert _counts({**record, "role": "gateway", "gateway_frame": None, "gc_ms": 1003.0})
