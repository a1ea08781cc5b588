"""``server.auto_pull``: fetching a configured model before its worker starts.

:func:`ensure_local` is what a worker handle awaits before it starts a
worker: when the model's source is a hub repo (or catalog name) with no
servable local snapshot and ``server.auto_pull`` is true, it pulls it in a
thread (:func:`gateway.hub.pull.pull`, recorded as asked by the server for
that model), reporting every :class:`~gateway.hub.progress.PullStatus` to
``on_status`` on the event loop and a log line at most every
:data:`LOG_EVERY` seconds. With ``auto_pull`` false it does nothing: the
worker then fails to load with a message saying to pull the model first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gateway.hub.catalog import load_catalog
from gateway.hub.progress import LineReport, PullStatus
from gateway.hub.pull import pull
from gateway.hub.served import pull_target
from shared.config import ModelConfig, ServerConfig
from shared.config_values import parse_size

log = logging.getLogger("mlxd.hub")

LOG_EVERY = 10.0
"""Seconds between progress log lines of a pull the server runs."""


async def ensure_local(model: ModelConfig, server: ServerConfig, on_status: Callable[[PullStatus], None]) -> bool:
    """Pull ``model``'s source when ``server.auto_pull`` asks for it and it
    is missing; return whether a pull ran.

    Raises:
        gateway.hub.pull.PullError: the pull failed (one line).
        gateway.hub.catalog.CatalogError: the catalog file is invalid.
    """
    if not server.auto_pull:
        return False
    catalog = await asyncio.to_thread(load_catalog, server.catalog_file)
    target = await asyncio.to_thread(pull_target, model, catalog)
    if target is None:
        return False
    loop = asyncio.get_running_loop()
    lines = LineReport(log.info, LOG_EVERY)

    def listener(status: PullStatus) -> None:
        lines(status)
        loop.call_soon_threadsafe(on_status, status)

    await loop.run_in_executor(
        None,
        lambda: pull(
            target,
            who=f"server (auto_pull for model {model.name})",
            max_bytes=parse_size(server.max_pull_bytes, 0),
            listener=listener,
        ),
    )
    return True


def download_report(status: PullStatus) -> dict[str, object]:
    """A pull's progress as ``/health`` and ``/api/ps`` show it: phase,
    bytes done and total, rate (bytes per second) and seconds left."""
    return {
        "phase": status.phase,
        "completed": status.done,
        "total": status.total,
        "rate": round(status.rate),
        "eta_seconds": None if status.eta is None else round(status.eta, 1),
        "error": status.error or None,
    }
