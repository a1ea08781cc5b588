"""Logging set-up shared by the gateway and its workers.

One line per record, with time, level, process role and logger name, on
standard error (launchd and the gateway collect it) or in a file. Messages
never contain prompt text or API keys at INFO level.

With a log file the gateway and its workers append to the same file. Only
the gateway rotates it (by size: ``server.log_max_bytes``, keeping
``server.log_backups`` older files as ``<file>.1`` .. ``<file>.N``); each
worker notices the rename on its next record and reopens the path, so no
process keeps writing into a rotated file for long and nothing else (no
newsyslog, no signal) is needed.
"""

from __future__ import annotations

import atexit
import logging
import logging.handlers
import queue
import sys


def setup_logging(
    level: str = "info",
    *,
    name: str = "gateway",
    log_file: str | None = None,
    max_bytes: int = 0,
    backups: int = 0,
    background: bool = False,
) -> None:
    """Configure the root logger once for this process.

    ``name`` labels every line (``gateway`` or ``worker:<id>``); with
    ``log_file`` records are appended to that file instead of stderr. With
    ``max_bytes`` > 0 and ``backups`` > 0 this process rotates the file when
    it would grow past ``max_bytes`` (the gateway); otherwise it reopens the
    file when another process has rotated it (workers). With
    ``background`` (the gateway and nodes, whose event loop must never wait
    for a disk) a record is only queued where it is logged; a thread
    writes it, and writes what is left when the process exits.
    """
    handler: logging.Handler
    if not log_file:
        handler = logging.StreamHandler(sys.stderr)
    elif max_bytes > 0 and backups > 0:
        handler = logging.handlers.RotatingFileHandler(
            log_file, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
        )
    else:
        handler = logging.handlers.WatchedFileHandler(log_file, encoding="utf-8")
    handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s [{name}] %(name)s: %(message)s"))
    if background:
        records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
        listener = logging.handlers.QueueListener(records, handler)
        listener.start()
        atexit.register(listener.stop)
        handler = logging.handlers.QueueHandler(records)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
