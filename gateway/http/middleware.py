"""Pure ASGI middleware: the Host check, CORS, API-key authentication and
the request-body cap (which also refuses compressed bodies).

Each answers in the error shape of the requested route's protocol and never
touches the event loop with blocking work. Keys are compared in constant
time against every configured key; the check runs on the raw ASGI path, so
no Host header or path rewrite can skip it.
"""

from __future__ import annotations

import asyncio
import hmac
import re
from typing import Any, Awaitable, Callable

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response

from gateway.core.errors import APIError
from gateway.core.grants import KEY_ENTRY_SCOPE
from gateway.frontend.error_shapes import error_response_for
from shared.config import api_key_entries

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

ALWAYS_PUBLIC = frozenset({"/health", "/openapi.json", "/", "/api/version"})
"""Routes that never need an API key (``/`` and ``/api/version`` are what
Ollama clients probe before anything else; neither reveals more than
``/health``). The composition may add more (the dashboard page's files,
which hold no data) through :class:`APIKeyMiddleware`'s ``public``."""

MONITORING_PATHS = frozenset({"/ready", "/metrics"})
"""Routes that need a key only when ``server.metrics_require_key`` is set."""


async def send_error(scope: Scope, receive: Receive, send: Send, err: APIError) -> None:
    """Send ``err`` as a complete JSON response in the protocol of the
    requested route (Anthropic's under ``/v1/messages``, Ollama's under
    ``/api/`` and at ``/``, else OpenAI's)."""
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


LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
"""Host names always accepted by :class:`HostCheckMiddleware` (IPv6 without
brackets)."""

_HOST_HEADER = re.compile(r"([a-z0-9._-]+|\[[0-9a-f:.]+\])(?::[0-9]*)?", re.IGNORECASE | re.ASCII)


def host_name(value: str) -> str | None:
    """The lower-cased host name of a ``Host`` header value, without port
    or IPv6 brackets; None when the value is not a plain ``host[:port]``
    (so ``a/#@b`` or ``localhost:8000@evil`` give None)."""
    match = _HOST_HEADER.fullmatch(value)
    return match.group(1).strip("[]").lower() if match else None


class HostCheckMiddleware:
    """Refuses with 421 every HTTP request whose single ``Host`` header does
    not name this server, against DNS rebinding.

    Accepted: :data:`LOOPBACK_HOSTS` and ``server.allowed_hosts`` (read from
    ``get_server()`` on every request). The check runs when the server is
    bound to a loopback address (``loopback``) and otherwise only while
    ``allowed_hosts`` is non-empty. A missing, repeated or malformed Host
    header is refused too.
    """

    def __init__(self, app: ASGIApp, get_server: Callable[[], Any], loopback: bool) -> None:
        self.app = app
        self.get_server = get_server
        self.loopback = loopback

    def _allowed(self, scope: Scope, extra: list[str]) -> bool:
        values = [value for name, value in scope.get("headers", []) if name == b"host"]
        if len(values) != 1:
            return False
        name = host_name(values[0].decode("latin-1"))
        return name is not None and (name in LOOPBACK_HOSTS or name in {h.strip("[]").lower() for h in extra})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        extra = self.get_server().allowed_hosts
        checked = scope["type"] == "http" and (self.loopback or extra)
        if checked and not self._allowed(scope, extra):
            err = APIError(
                421,
                "This server does not answer for the requested Host (see server.allowed_hosts)",
                code="host_not_allowed",
            )
            await send_error(scope, receive, send, err)
            return
        await self.app(scope, receive, send)


CORS_METHODS = ("GET", "POST", "OPTIONS")
"""Methods a configured cross-origin caller may use."""

CORS_HEADERS = ("Authorization", "Content-Type", "x-api-key", "anthropic-version")
"""Request headers a configured cross-origin caller may send."""


class ProtocolCORSMiddleware(CORSMiddleware):
    """Starlette's CORS handling for ``origins`` with :data:`CORS_METHODS`
    and :data:`CORS_HEADERS`. Preflights are answered here, before any API
    key check; a refused preflight gets a 400 in the route's protocol error
    shape (keeping the CORS headers) instead of Starlette's plain text.
    """

    def __init__(self, app: ASGIApp, origins: list[str]) -> None:
        super().__init__(app, allow_origins=origins, allow_methods=CORS_METHODS, allow_headers=CORS_HEADERS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope) if scope["type"] == "http" else None
        preflight = (
            headers is not None
            and scope["method"] == "OPTIONS"
            and "origin" in headers
            and "access-control-request-method" in headers
        )
        if not preflight:
            await super().__call__(scope, receive, send)
            return
        response = self.preflight_response(request_headers=headers)
        if response.status_code != 200:
            response = _refused_preflight(scope.get("path", ""), response)
        await response(scope, receive, send)


def _refused_preflight(path: str, refusal: Response) -> Response:
    """Starlette's plain-text preflight refusal as a protocol-shaped 400
    with the same CORS headers."""
    message = bytes(refusal.body).decode()
    response = error_response_for(path, APIError(400, message, code="cors_refused"))
    for name, value in refusal.headers.items():
        if name.startswith("access-control-") or name == "vary":
            response.headers[name] = value
    return response


class APIKeyMiddleware:
    """Requires one of the configured keys on every HTTP request outside
    :data:`ALWAYS_PUBLIC` and ``public`` (and :data:`MONITORING_PATHS`
    unless the config says otherwise); with no keys configured it lets
    everything pass.

    ``get_server`` returns the current ``ServerConfig`` and is read on every
    request, so a config reload takes effect at once. The entry a request's
    key matched (a :class:`shared.config.ApiKeyConfig`; plain-string keys
    as :func:`shared.config.api_key_entries` gives them) is left in the
    ASGI scope under :data:`gateway.core.grants.KEY_ENTRY_SCOPE` for the
    key limits (:mod:`gateway.limits`), also on a public route.
    """

    def __init__(self, app: ASGIApp, get_server: Callable[[], Any], public: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.get_server = get_server
        self.public = ALWAYS_PUBLIC | public

    def _public(self, path: str, server: Any) -> bool:
        if path in self.public:
            return True
        return path in MONITORING_PATHS and not server.metrics_require_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server = self.get_server()
        if scope["type"] != "http" or not server.api_keys:
            await self.app(scope, receive, send)
            return
        presented = _presented_key(scope) or b""
        matched = None
        for entry in api_key_entries(server):  # every key compared: constant time
            if hmac.compare_digest(presented, entry.key.encode()) and matched is None:
                matched = entry
        if matched is not None:
            scope[KEY_ENTRY_SCOPE] = matched
        elif not self._public(scope.get("path", ""), server):
            await send_error(scope, receive, send, APIError(401, "Invalid or missing API key", code="invalid_api_key"))
            return
        await self.app(scope, receive, send)


def _unsupported_encoding(scope: Scope) -> str | None:
    """The first ``Content-Encoding`` coding other than identity, if any."""
    for name, value in scope.get("headers", []):
        if name == b"content-encoding":
            for coding in value.decode("latin-1").split(","):
                if coding.strip().lower() not in ("", "identity"):
                    return coding.strip()
    return None


class BodyLimitMiddleware:
    """Reads each request body up front, at most ``limit`` bytes, within
    ``timeout`` seconds.

    A body with a ``Content-Encoding`` other than identity gets 415 before
    anything is read (compressed bodies are never inflated: no zip bombs).
    A declared or actual body over the limit gets 413 before the app runs,
    and a body still incomplete ``timeout`` seconds after the app was called
    gets 408 (a client trickling its body cannot hold a connection and a
    request slot forever); otherwise the app receives the buffered body, and
    later ``receive`` calls pass through (so disconnects are still seen).
    """

    def __init__(self, app: ASGIApp, limit: int, timeout: float = 30.0) -> None:
        self.app = app
        self.limit = limit
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        coding = _unsupported_encoding(scope)
        if coding is not None:
            err = APIError(
                415,
                f"Content-Encoding '{coding}' is not supported; send the body uncompressed",
                code="unsupported_content_encoding",
            )
            await send_error(scope, receive, send, err)
            return
        too_big = APIError(413, f"Request body exceeds the limit of {self.limit} bytes", code="request_too_large")
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                if value.isdigit() and int(value) > self.limit:
                    await send_error(scope, receive, send, too_big)
                    return
        chunks: list[bytes] = []
        size = 0
        deadline = asyncio.get_running_loop().time() + self.timeout
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - asyncio.get_running_loop().time()))
            except TimeoutError:
                err = APIError(408, f"Request body not complete within {self.timeout:g} seconds", code="timeout")
                await send_error(scope, receive, send, err)
                return
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
