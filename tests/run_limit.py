"""Run the test command with a whole-run time limit and a leak check.

``python -m tests.run_limit --limit SECONDS -- COMMAND...`` (what
``make test`` runs) starts ``COMMAND`` with a marker variable
(:data:`MARK`) in its environment that every process it starts inherits:
the pytest processes, the gateways the tests start, their workers, even
those started in a session of their own or orphaned by a killed parent.
The marker is how this module finds them.

- **A run that hangs costs minutes and names its place.** When ``COMMAND``
  is still running after ``SECONDS``, the stacks of every live Python
  process of the run are printed (``py-spy dump``, every thread), then
  every process of the run is killed and the exit status is 124.
- **No test leaks a process.** When ``COMMAND`` has ended, any process of
  the run still alive :data:`GRACE` seconds later is named (pid, age,
  command line, its stacks), killed, and the exit status is 1 even if the
  tests passed.
- Ctrl-C (SIGINT) and SIGTERM are passed on to ``COMMAND``.

The exit status is otherwise ``COMMAND``'s own.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

import psutil

MARK = "MLXD_TEST_RUN"
"""The environment variable that marks every process of one run."""

GRACE = 15.0
"""Seconds the processes of a finished run get to exit before they count
as leaked."""

DUMP_TIMEOUT = 30.0
"""Seconds one stack dump may take."""


def run_processes(token: str) -> list[psutil.Process]:
    """The live processes (zombies left out) whose environment carries
    :data:`MARK` = ``token``, this one excepted."""
    found = []
    for proc in psutil.process_iter(["pid", "status"]):
        if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if proc.environ().get(MARK) == token:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def describe(proc: psutil.Process) -> str:
    """One line naming ``proc``: pid, seconds alive, command line."""
    try:
        age = time.time() - proc.create_time()
        args = " ".join(proc.cmdline())[:300]
    except psutil.Error:
        return f"pid {proc.pid} (gone)"
    return f"pid {proc.pid}, alive {age:.0f} s: {args}"


def dump_stacks(procs: list[psutil.Process]) -> None:
    """Print every thread's Python stack of each Python process in
    ``procs`` (``py-spy dump``; a note when py-spy is not installed)."""
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))
    for proc in procs:
        print(f"\n--- {describe(proc)}", flush=True)
        try:
            if "python" not in os.path.basename(proc.exe() or proc.name()):
                continue
        except psutil.Error:
            continue
        if spy is None:
            print("(py-spy is not installed: no stacks)", flush=True)
            continue
        try:
            subprocess.run([spy, "dump", "--pid", str(proc.pid)], timeout=DUMP_TIMEOUT, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            print(f"(py-spy dump of {proc.pid} took over {DUMP_TIMEOUT:.0f} s)", flush=True)
        sys.stdout.flush()


def kill_all(procs: list[psutil.Process]) -> None:
    """SIGKILL each of ``procs`` and wait briefly for them to go."""
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=10)


def main(argv: list[str] | None = None) -> int:
    """Run the command (see the module docstring); return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, required=True, help="seconds the whole run may take")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    token = uuid.uuid4().hex
    child = subprocess.Popen(command, env={**os.environ, MARK: token})

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    try:
        status = child.wait(timeout=args.limit)
    except subprocess.TimeoutExpired:
        print(
            f"\nrun_limit: the run took longer than its limit of {args.limit:.0f} s;"
            " the stacks of its live processes follow, then all are killed",
            flush=True,
        )
        procs = run_processes(token)
        dump_stacks(procs)
        kill_all([*procs, psutil.Process(child.pid)])
        child.wait()
        return 124
    deadline = time.monotonic() + GRACE
    left = run_processes(token)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = run_processes(token)
    if not left:
        return status
    print(f"\nrun_limit: {len(left)} process(es) of this run still alive {GRACE:.0f} s after it ended (leaked):")
    for proc in left:
        print(f"  {describe(proc)}")
    dump_stacks(left)
    kill_all(left)
    return status or 1


if __name__ == "__main__":
    sys.exit(main())
