"""Per-user directories mlxd writes to (no MLX, no side effects on import)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def state_dir() -> Path:
    """Where the running server keeps small state files such as its pid file:
    ``~/Library/Caches/mlxd`` on macOS, ``${XDG_CACHE_HOME:-~/.cache}/mlxd``
    elsewhere. Not created here."""
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "mlxd"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "mlxd"


def default_pid_file(port: int) -> Path:
    """The pid file of a server listening on ``port``."""
    return state_dir() / f"mlxd-{port}.pid"
