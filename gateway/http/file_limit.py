"""The gateway's open-file limit, raised at start to what its config needs.

Every streaming client holds a socket, and each worker a few sockets and
files, so a gateway needs about :data:`BASE_FILES` plus two descriptors per
sequence it may hold (``max_batch_size + max_queued`` over all models).
launchd starts agents with a soft limit of 256, which a few hundred clients
exceed (``accept`` then fails with "Too many open files"). Workers inherit
the raised limit. Runs once on the main thread before the server starts.
"""

from __future__ import annotations

import logging
import sys

from shared.config import Config

log = logging.getLogger("mlxd.gateway")

BASE_FILES = 256
"""Descriptors for everything but client connections: worker sockets and
pipes, model files, logs, the listening socket."""

OPEN_MAX = 10240
"""The most a macOS process may set its soft limit to (``OPEN_MAX``; macOS
refuses larger values even with an unlimited hard limit)."""


def files_needed(config: Config) -> int:
    """Open files ``config`` may need: :data:`BASE_FILES` plus two per
    sequence every model may hold (decoding or queued)."""
    return BASE_FILES + 2 * sum(m.max_batch_size + m.max_queued for m in config.models)


def raise_file_limit(needed: int, platform: str = sys.platform) -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to ``needed`` (never above the hard
    limit, nor :data:`OPEN_MAX` on macOS; never lowered); return the soft
    and hard limits now in force. Logs a warning when the hard limit is
    below ``needed``; never raises."""
    try:
        import resource
    except ImportError:  # not a Unix
        return (0, 0)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = hard if hard != resource.RLIM_INFINITY else needed
    if platform == "darwin":
        ceiling = min(ceiling, OPEN_MAX)
    target = min(needed, ceiling)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("raised the open-file limit from %d to %d", soft, target)
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
    if soft != resource.RLIM_INFINITY and soft < needed:
        log.warning(
            "the open-file limit (%d) is below the %d the configured models may need; "
            "clients may be refused with 'Too many open files'",
            soft,
            needed,
        )
    return soft, hard
