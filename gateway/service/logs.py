"""The mlxd service's log files: where launchd sends its output, and
rolling those files over.

launchd opens the agent's standard output and error files itself
(``~/Library/Logs/mlxd/``:data:`OUT_LOG` and :data:`ERR_LOG`) and never
rotates them; :func:`rotate_service_streams` does, once at each service
start, on the gateway's main thread before the server starts.
:data:`SERVICE_LOG` is the service's own (rotated) log when the config
sets no ``log_file``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

OUT_LOG = "mlxd.out.log"
"""The file (in the log directory) launchd sends the agent's standard output to."""

ERR_LOG = "mlxd.err.log"
"""The file (in the log directory) launchd sends the agent's standard error to."""

SERVICE_LOG = "mlxd.log"
"""The service's own log (rotated by the gateway, see :mod:`shared.logging`)
when the config sets no ``log_file``; ``OUT_LOG`` and ``ERR_LOG`` get only
what is printed before logging starts and crash output."""


def default_log_dir() -> Path:
    """``~/Library/Logs/mlxd``: where the agent's stdout and stderr go."""
    return Path.home() / "Library" / "Logs" / "mlxd"


def rotate_service_streams(
    log_dir: Path, max_bytes: int, backups: int, streams: Sequence[tuple[int, str]] = ((1, OUT_LOG), (2, ERR_LOG))
) -> list[Path]:
    """Roll over the files launchd writes the agent's stdout and stderr to
    (``log_dir``/:data:`OUT_LOG` and :data:`ERR_LOG`) when one has grown
    past ``max_bytes`` (0: never): ``<file>`` becomes ``<file>.1`` (older
    ones shift up to ``<file>.<backups>``; the oldest is dropped) and the
    descriptor is pointed at a fresh ``<file>`` with ``dup2``. launchd opens
    these files itself and never rotates them, so this runs once at each
    service start. A descriptor that is not that file (a terminal, another
    path) is left alone. ``streams`` pairs each descriptor with its file
    name. Returns the files rolled over; never raises for a missing or
    unreadable file (it is then left as it is)."""
    rolled: list[Path] = []
    if max_bytes <= 0:
        return rolled
    for fd, name in streams:
        path = log_dir / name
        try:
            here, there = os.fstat(fd), path.stat()
            if (here.st_dev, here.st_ino) != (there.st_dev, there.st_ino) or there.st_size <= max_bytes:
                continue
            for n in range(backups - 1, 0, -1):
                older = path.with_name(f"{name}.{n}")
                if older.exists():
                    os.replace(older, path.with_name(f"{name}.{n + 1}"))
            os.replace(path, path.with_name(f"{name}.1"))
            fresh = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.dup2(fresh, fd)
            finally:
                os.close(fresh)
            rolled.append(path)
        except OSError:
            continue
    return rolled
