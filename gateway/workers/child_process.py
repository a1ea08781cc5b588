"""A child process started in a worker thread and awaited on the event loop.

Starting a process blocks the calling thread until the child has called
``exec`` (CPython starts it with ``vfork``), which on a busy machine lasts
as long as the new process waits for a CPU: hundreds of milliseconds were
measured here. :func:`spawn` therefore starts it in a worker thread, and
:class:`ChildProcess` waits for its exit without blocking the loop: through
a pid file descriptor the loop watches (Linux), else through a thread of
its own that waits for it. :func:`watch_children_without_threads` does
the same for the processes libraries start through asyncio (the MCP SDK's
stdio servers).
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
import sys
import threading


class ChildProcess:
    """A started child process (see :func:`spawn`), used from the event
    loop that started it: ``pid``, :attr:`returncode` (None while it
    runs), :meth:`wait`, :meth:`kill` and :meth:`send_signal`."""

    def __init__(self, popen: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop) -> None:
        self._popen = popen
        self.pid = popen.pid
        self._loop = loop
        self._exited: asyncio.Future[None] = loop.create_future()
        try:
            fd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # not Linux, or too old a kernel
            threading.Thread(target=self._wait_in_thread, name=f"wait-{self.pid}", daemon=True).start()
        else:
            loop.add_reader(fd, self._reap, fd)

    @property
    def returncode(self) -> int | None:
        """The exit status (negative: the signal that ended it), or None
        while it runs."""
        return self._popen.returncode

    async def wait(self) -> int:
        """Wait until the process has exited; return its exit status."""
        await asyncio.shield(self._exited)
        assert self._popen.returncode is not None
        return self._popen.returncode

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` unless the process has already been reaped."""
        self._popen.send_signal(sig)

    def kill(self) -> None:
        """End the process at once (SIGKILL)."""
        self.send_signal(signal.SIGKILL)

    def _reap(self, fd: int) -> None:
        """The pid file descriptor is readable: the process has exited."""
        self._loop.remove_reader(fd)
        os.close(fd)
        self._popen.wait()  # exited: returns at once, reaping it
        self._set_exited()

    def _wait_in_thread(self) -> None:
        self._popen.wait()
        self._loop.call_soon_threadsafe(self._set_exited)

    def _set_exited(self) -> None:
        if not self._exited.done():
            self._exited.set_result(None)


async def spawn(args: list[str], env: dict[str, str]) -> ChildProcess:
    """Start ``args`` in a new session with environment ``env``, standard
    input from ``/dev/null`` and this process's standard output and error,
    without blocking the event loop. Cancelled meanwhile, the process is
    killed (and reaped) once it has started.

    Raises:
        OSError: the program could not be started.
    """
    loop = asyncio.get_running_loop()
    start = functools.partial(subprocess.Popen, args, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    started = loop.run_in_executor(None, start)
    try:
        popen = await asyncio.shield(started)
    except asyncio.CancelledError:
        started.add_done_callback(lambda done: _discard(done, loop))
        raise
    return ChildProcess(popen, loop)


def _discard(started: asyncio.Future[subprocess.Popen[bytes]], loop: asyncio.AbstractEventLoop) -> None:
    """Kill a process whose starter was cancelled (and reap it)."""
    if started.cancelled() or started.exception() is not None:
        return
    ChildProcess(started.result(), loop).kill()


def watch_children_without_threads() -> None:
    """Have asyncio wait for child processes through pid file descriptors
    on the running loop (Linux, Python 3.11; later versions do by default).

    Python 3.11's default child watcher starts one thread per child and
    blocks the event loop until that thread has run, which on a busy
    machine takes seconds. Call it on the running loop before anything
    starts a process through asyncio; elsewhere it changes nothing.
    """
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))  # the kernel (5.3+) and any sandbox allow pidfds
    except OSError:
        return
    watcher = asyncio.PidfdChildWatcher()
    watcher.attach_loop(asyncio.get_running_loop())
    asyncio.set_child_watcher(watcher)
