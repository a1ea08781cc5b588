"""Reporting the hosted tools a request named that mlxd cannot run.

Clients such as Codex list provider-hosted tools (``web_search``,
``file_search``, ``code_interpreter``, ...) by default. mlxd has no such
service to run them, so rather than refusing the whole turn it drops them:
the model never sees them, one log line names them, and every answer to the
request (JSON or stream) carries the header :data:`DROPPED_TOOLS_HEADER`
listing their types, comma-separated, in request order without duplicates.
A request that *forces* a dropped tool (a ``tool_choice`` naming it) is
still refused, since answering without it would mislead.
"""

from __future__ import annotations

import logging
from typing import Iterable

log = logging.getLogger("mlxd.gateway.tools")

DROPPED_TOOLS_HEADER = "x-mlxd-dropped-tools"
"""Response header listing the dropped tool types."""


def dropped_headers(kinds: Iterable[str], endpoint: str) -> dict[str, str]:
    """The response headers for tools of ``kinds`` dropped from a request to
    ``endpoint`` (empty when none), logging them once at INFO."""
    unique = list(dict.fromkeys(kinds))
    if not unique:
        return {}
    log.info("%s: dropped tools mlxd cannot run: %s", endpoint, ", ".join(unique))
    return {DROPPED_TOOLS_HEADER: ",".join(unique)}
