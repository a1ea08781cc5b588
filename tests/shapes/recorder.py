"""An ASGI middleware that records every HTTP response a test gateway sends.

It wraps the gateway app in test gateways only: in the gateway processes the
e2e tests start (through :mod:`tests.shapes.serve`) and around the route
apps of the unit tests (``tests/unit/support.py``). For each request it
keeps the method, path, whether it came through Anthropic's beta surface,
the status, content type and the whole body, streamed or not, and hands one
record (a dict) to a sink when the response ends: a
:class:`FileSink` appends it as a JSON line, a list collects it in-process.
The checks run in the test process (:mod:`tests.shapes.plugin`); this module
imports nothing heavy, so a gateway starts as fast as without it.

The record of a complete response is written before its last body chunk is
passed on, so a client that has read a whole answer finds it recorded. A
response that ends otherwise (the client left, the connection broke, the
app raised) is recorded with ``complete`` False when the app returns.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

Record = dict[str, Any]
"""``{"method", "path", "beta", "status", "content_type", "body", "complete"}``."""

BETA_HEADER = b"anthropic-beta"


class FileSink:
    """Appends each record as one JSON line to ``path`` (one ``write`` call
    per record, in append mode, so records of concurrent responses never
    interleave)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def __call__(self, record: Record) -> None:
        """Write ``record``."""
        os.write(self._fd, (json.dumps(record) + "\n").encode())


def is_beta(scope: dict) -> bool:
    """Whether a request came through the Anthropic SDKs' beta surface
    (``client.beta.messages``): ``?beta=true`` or an ``anthropic-beta`` header."""
    query = scope.get("query_string", b"").split(b"&")
    return b"beta=true" in query or any(name.lower() == BETA_HEADER for name, _ in scope.get("headers", []))


class ResponseRecorder:
    """ASGI middleware: passes every message through unchanged and records
    each HTTP response into ``sink`` (see the module docstring)."""

    def __init__(self, app: Any, sink: Callable[[Record], None]) -> None:
        self.app = app
        self.sink = sink

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        """Serve ``scope`` through the wrapped app, recording an HTTP response."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        record: Record = {
            "method": scope["method"],
            "path": scope["path"],
            "beta": is_beta(scope),
            "status": 0,
            "content_type": "",
        }
        chunks: list[bytes] = []
        done = False

        async def recording_send(message: dict) -> None:
            nonlocal done
            if message["type"] == "http.response.start":
                record["status"] = message["status"]
                for name, value in message.get("headers", []):
                    if name.lower() == b"content-type":
                        record["content_type"] = value.decode("latin-1")
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False) and not done:
                    done = True
                    self._write(record, chunks, complete=True)
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            if not done and record["status"]:
                self._write(record, chunks, complete=False)

    def _write(self, record: Record, chunks: list[bytes], complete: bool) -> None:
        body = b"".join(chunks)
        self.sink({**record, "body": body.decode("utf-8", errors="replace"), "complete": complete})
