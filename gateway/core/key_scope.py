"""Which API key the request being served presented, by name.

The API-key check (:class:`gateway.http.middleware.APIKeyMiddleware`)
calls :func:`enter_key` with the key it matched; everything that runs for
that request (the route, its answer's streaming, tasks it starts) reads
:func:`current_key_name`, because the name lives in a context variable
that asyncio copies into tasks. The worker pool puts it on every
:class:`~shared.protocol.GenerateRequest` (``key_name``), so a worker keeps
what one key's requests wrote apart from another key's.

The name is derived from the key (:func:`key_name`): the first 16 hex
digits of its SHA-256, stable across restarts and config reloads, never
the key itself. Pure; any thread (a context variable per context).
"""

from __future__ import annotations

import hashlib
from contextvars import ContextVar

_current: ContextVar[str] = ContextVar("mlxd_key_name", default="")


def key_name(key: str) -> str:
    """The name of API key ``key``: ``key-`` and 16 hex digits of its
    SHA-256."""
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def enter_key(key: str) -> None:
    """Mark the current context as serving a request that presented
    ``key``."""
    _current.set(key_name(key))


def current_key_name() -> str:
    """The name of the key the current request presented (``""`` when the
    server has no keys or the route is public)."""
    return _current.get()
