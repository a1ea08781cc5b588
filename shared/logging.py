"""Logging set-up shared by the gateway and its workers.

One line per record, with time, level, process role and logger name, on
standard error (launchd and the gateway collect it) or in a file. Messages
never contain prompt text or API keys at INFO level.
"""

from __future__ import annotations

import logging
import sys


def setup_logging(level: str = "info", *, name: str = "gateway", log_file: str | None = None) -> None:
    """Configure the root logger once for this process.

    ``name`` labels every line (``gateway`` or ``worker:<id>``); with
    ``log_file`` records are appended to that file instead of stderr.
    """
    handler: logging.Handler = (
        logging.FileHandler(log_file, encoding="utf-8") if log_file else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s [{name}] %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
