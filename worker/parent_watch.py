"""The watchdog that keeps a worker from outliving its gateway.

:func:`watch_parent` ends the worker process (exit code 0) when the
gateway that started it is gone, removing the socket files the gateway
could not (see :func:`shared.sockets.remove_socket_files`). It runs on a
daemon thread ``mlxd-parent-watch`` (and, on Linux, from the SIGTERM the
kernel sends at the parent's death, on the main thread).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from shared.sockets import Endpoints, remove_socket_files


def watch_parent(parent_pid: int, endpoints: Endpoints | None, interval: float = 0.5) -> None:
    """End this process when ``parent_pid`` is no longer its parent (the
    gateway died, even by SIGKILL), removing the socket files the gateway
    could not. On Linux the kernel also sends SIGTERM at the parent's
    death, which is handled the same way; elsewhere a daemon thread polls.
    ``endpoints`` None: a tensor-parallel rank, whose parent is the group's
    launcher (which removes the socket files when the gateway dies)."""

    def orphaned(*_: object) -> None:
        if endpoints is not None:
            remove_socket_files(endpoints, directory=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, orphaned)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except OSError:
            pass
    if os.getppid() != parent_pid:
        orphaned()

    def loop() -> None:
        while True:
            time.sleep(interval)
            if os.getppid() != parent_pid:
                orphaned()

    threading.Thread(target=loop, name="mlxd-parent-watch", daemon=True).start()
