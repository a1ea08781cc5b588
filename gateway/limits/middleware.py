"""The key-limits middleware: admits or refuses each model request by its
API key's limits, and tells the client where it stands.

Runs inside the API-key check (:class:`gateway.http.middleware.APIKeyMiddleware`),
which leaves the matched :class:`shared.config.ApiKeyConfig` in the scope.
For every request with a key it sets the request's
:class:`~gateway.core.grants.KeyGrant` (the models the key may use, where
its tokens are counted). A model request (``POST`` on :data:`LIMITED_PATHS`)
is then checked against the key's limits, in this order: concurrent
requests, requests per minute, tokens per minute (see
:mod:`gateway.limits.counters`). Over one, it is answered at once with a
429 in the route's protocol (OpenAI's error object with type
``requests`` or ``tokens`` and code ``rate_limit_exceeded``; Anthropic's
``rate_limit_error``; Ollama's ``{"error": ...}``), with ``Retry-After``
and nothing reaches a worker. An admitted request holds one concurrency
slot until its answer has been sent (also a stream, also when the client
goes away). Answers of a key with per-minute limits carry their state:
OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``
everywhere but ``/v1/messages``, which carries Anthropic's
``anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}``.

Keys given as plain strings have no limits: they pass untouched (and are
counted for ``/metrics``). Event loop only.
"""

from __future__ import annotations

import datetime
import logging
import time
from typing import Any, Awaitable, Callable

from gateway.core.errors import APIError
from gateway.core.grants import KEY_ENTRY_SCOPE, KeyGrant, current_grant
from gateway.frontend.error_shapes import error_response_for, is_anthropic_path
from gateway.limits.counters import KeyCounters, KeyLimits, Refusal
from shared.config import ApiKeyConfig

log = logging.getLogger("mlxd.gateway.limits")

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LIMITED_PATHS = frozenset(
    {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/messages",
        "/v1/embeddings",
        "/v1/rerank",
        "/rerank",
        "/v2/rerank",
        "/v1/audio/speech",
        "/v1/audio/transcriptions",
        "/v1/audio/translations",
        "/api/chat",
        "/api/generate",
        "/api/embed",
        "/api/embeddings",
    }
)
"""The model requests a key's limits count (``POST`` only); other routes
(listings, token counts, status) only check the key and its models."""

_LIMIT_NAMES = {
    "requests": "requests per minute",
    "tokens": "tokens per minute",
    "concurrency": "concurrent requests",
}


def openai_duration(seconds: float) -> str:
    """``seconds`` as OpenAI writes its reset headers: ``250ms``, ``1.5s``,
    ``6m0s``."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    if seconds < 60:
        return f"{round(seconds, 2):g}s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest}s"


def rate_headers(path: str, entry: ApiKeyConfig, counters: KeyCounters, now: float, wall: float) -> dict[str, str]:
    """The rate-limit headers of an answer on ``path`` for key ``entry``
    (none for a limit the key does not have)."""
    headers: dict[str, str] = {}
    anthropic = is_anthropic_path(path)
    for kind, limit in (("requests", entry.requests_per_minute), ("tokens", entry.tokens_per_minute)):
        if not limit:
            continue
        state = counters.window(kind, limit, now)
        if anthropic:
            at = datetime.datetime.fromtimestamp(wall + state.reset, datetime.UTC)
            headers[f"anthropic-ratelimit-{kind}-limit"] = str(state.limit)
            headers[f"anthropic-ratelimit-{kind}-remaining"] = str(state.remaining)
            headers[f"anthropic-ratelimit-{kind}-reset"] = at.isoformat(timespec="seconds").replace("+00:00", "Z")
        else:
            headers[f"x-ratelimit-limit-{kind}"] = str(state.limit)
            headers[f"x-ratelimit-remaining-{kind}"] = str(state.remaining)
            headers[f"x-ratelimit-reset-{kind}"] = openai_duration(state.reset)
    return headers


def rate_limit_error(name: str, refusal: Refusal, headers: dict[str, str]) -> APIError:
    """The 429 for a request of key ``name`` over ``refusal``'s limit."""
    message = (
        f"Rate limit reached for API key '{name}' on {_LIMIT_NAMES[refusal.limit]}: "
        f"limit {refusal.allowed}, used {refusal.used}. Please try again in {refusal.retry_after}s."
    )
    return APIError(
        429,
        message,
        code="rate_limit_exceeded",
        retry_after=refusal.retry_after,
        openai_type="tokens" if refusal.limit == "tokens" else "requests",
        headers=headers,
    )


class KeyLimitMiddleware:
    """Applies each request's key limits (see the module docstring);
    ``limits`` holds the counters for the gateway's lifetime and ``wall``
    gives Unix time (for Anthropic's reset times)."""

    def __init__(self, app: ASGIApp, limits: KeyLimits, wall: Callable[[], float] = time.time) -> None:
        self.app = app
        self.limits = limits
        self.wall = wall

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        entry: ApiKeyConfig | None = scope.get(KEY_ENTRY_SCOPE) if scope["type"] == "http" else None
        if entry is None:
            await self.app(scope, receive, send)
            return
        grant = KeyGrant(entry.name, frozenset(entry.models), self.limits.spender(entry.name))
        token = current_grant.set(grant)
        try:
            if scope.get("method") == "POST" and scope.get("path") in LIMITED_PATHS:
                await self._limited(entry, scope, receive, send)
            else:
                await self.app(scope, receive, send)
        finally:
            current_grant.reset(token)

    async def _limited(self, entry: ApiKeyConfig, scope: Scope, receive: Receive, send: Send) -> None:
        """Admit or refuse one model request of key ``entry``."""
        path = scope["path"]
        counters = self.limits.of(entry.name)
        now = self.limits.clock()
        refusal = counters.refusal(entry, now)
        if refusal is not None:
            counters.refused[refusal.limit] += 1
            log.info("API key %s refused on %s: %s limit %d", entry.name, path, refusal.limit, refusal.allowed)
            err = rate_limit_error(entry.name, refusal, rate_headers(path, entry, counters, now, self.wall()))
            await error_response_for(path, err)(scope, receive, send)
            return
        counters.admit(now)
        extra = [(k.encode(), v.encode()) for k, v in rate_headers(path, entry, counters, now, self.wall()).items()]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start" and extra:
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            counters.release()
