"""Pure ASGI middleware: API-key authentication and the request-body cap.

Both answer in OpenAI's error shape and never touch the event loop with
blocking work. Keys are compared in constant time against every configured
key; the check runs on the raw ASGI path, so no Host header or path rewrite
can skip it.
"""

from __future__ import annotations

import hmac
from typing import Any, Awaitable, Callable

from gateway.errors import APIError

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

ALWAYS_PUBLIC = frozenset({"/health"})
"""Routes that never need an API key."""

MONITORING_PATHS = frozenset({"/ready", "/metrics"})
"""Routes that need a key only when ``server.metrics_require_key`` is set."""


async def send_error(scope: Scope, receive: Receive, send: Send, err: APIError) -> None:
    """Send ``err`` as a complete JSON response in the protocol of the
    requested route (Anthropic's under ``/v1/messages``, else OpenAI's)."""
    from gateway.error_responses import error_response_for

    response = error_response_for(scope.get("path", ""), err)
    if err.status == 401:
        response.headers["www-authenticate"] = "Bearer"
    await response(scope, receive, send)


def _presented_key(scope: Scope) -> bytes | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.partition(b" ")
            if scheme.lower() == b"bearer":
                return token.strip()
        elif name == b"x-api-key":
            return value.strip()
    return None


class APIKeyMiddleware:
    """Requires one of the configured keys on every HTTP request outside
    :data:`ALWAYS_PUBLIC` (and :data:`MONITORING_PATHS` unless the config
    says otherwise); with no keys configured it lets everything pass.

    ``get_server`` returns the current ``ServerConfig`` and is read on every
    request, so a config reload takes effect at once.
    """

    def __init__(self, app: ASGIApp, get_server: Callable[[], Any]) -> None:
        self.app = app
        self.get_server = get_server

    def _public(self, path: str, server: Any) -> bool:
        if path in ALWAYS_PUBLIC:
            return True
        return path in MONITORING_PATHS and not server.metrics_require_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server = self.get_server()
        keys = server.api_keys
        if scope["type"] != "http" or not keys or self._public(scope.get("path", ""), server):
            await self.app(scope, receive, send)
            return
        presented = _presented_key(scope) or b""
        ok = False
        for key in keys:
            ok |= hmac.compare_digest(presented, key.encode())
        if not ok:
            await send_error(scope, receive, send, APIError(401, "Invalid or missing API key", code="invalid_api_key"))
            return
        await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """Reads each request body up front, at most ``limit`` bytes.

    A declared or actual body over the limit gets 413 before the app runs;
    otherwise the app receives the buffered body, and later ``receive``
    calls pass through (so disconnects are still seen).
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_big = APIError(413, f"Request body exceeds the limit of {self.limit} bytes", code="request_too_large")
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                if value.isdigit() and int(value) > self.limit:
                    await send_error(scope, receive, send, too_big)
                    return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # client went away before sending the body
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await send_error(scope, receive, send, too_big)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
