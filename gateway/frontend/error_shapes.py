"""How an :class:`~gateway.core.errors.APIError` looks on the wire, per protocol,
and which protocol a request path speaks.

One renderer per protocol:

* OpenAI (every route not named below): ``{"error": {"message", "type",
  "param", "code"}}`` with the error's status; an ``overloaded`` error always
  carries ``Retry-After``. Mid-stream: a ``data: {"error": {...}}`` frame
  with type ``server_error``.
* Anthropic (``/v1/messages`` and below): ``{"type": "error", "error":
  {"type", "message"}, "request_id": "req_…"}`` plus a ``request-id``
  header. A 503 becomes Anthropic's 529 ``overloaded_error`` (the SDK
  retries it) and a 529 always carries ``Retry-After``. Mid-stream: an
  ``event: error`` frame with the same body (the stream's request id).
* Ollama (``/`` and ``/api/...``): ``{"error": "message"}`` with the
  error's status and its ``Retry-After`` when set.

:func:`error_response_for` picks the renderer from the path; the middleware,
the error handlers and the HTTP protocol use it for failures raised before
any route runs. This module imports no routes module.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.responses import JSONResponse, Response

from gateway.core.errors import OVERLOADED_RETRY_AFTER, APIError
from gateway.core.ids import new_id
from gateway.frontend import sse
from gateway.frontend.request_flow import JSON_MEDIA_TYPE

# --- which protocol ----------------------------------------------------------------

ANTHROPIC_PREFIX = "/v1/messages"
"""The path (and prefix) of the Anthropic Messages API."""


def is_anthropic_path(path: str) -> bool:
    """Whether ``path`` belongs to the Anthropic Messages API."""
    return path == ANTHROPIC_PREFIX or path.startswith(ANTHROPIC_PREFIX + "/")


def is_ollama_path(path: str) -> bool:
    """Whether ``path`` belongs to the Ollama-compatible API."""
    return path == "/" or path == "/api" or path.startswith("/api/")


def error_response_for(path: str, err: APIError) -> Response:
    """The response for ``err`` in the protocol of the route at ``path``:
    Ollama's under ``/api/`` and at ``/``, Anthropic's under
    ``/v1/messages``, else OpenAI's."""
    if is_ollama_path(path):
        return ollama_error_response(err)
    if is_anthropic_path(path):
        return anthropic_error_response(err)
    return openai_error_response(err)


# --- OpenAI ------------------------------------------------------------------------

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}


def openai_error_type(status: int) -> str:
    """The OpenAI error ``type`` for ``status``: the table above; other 5xx
    are ``server_error``, other statuses ``invalid_request_error``."""
    return _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def openai_error_body(err: APIError) -> dict[str, Any]:
    """The OpenAI error object ``{"error": {"message", "type", "param", "code"}}``."""
    return {
        "error": {
            "message": err.message,
            "type": err.openai_type or openai_error_type(err.status),
            "param": err.param,
            "code": err.code,
        }
    }


def openai_error_response(err: APIError) -> JSONResponse:
    """The OpenAI-shaped JSON response for ``err`` (its status, body
    :func:`openai_error_body` and ``Retry-After`` when set). An
    ``overloaded`` error always carries ``Retry-After`` so clients back off
    and retry."""
    headers = err.headers()
    if err.code == "overloaded":
        headers.setdefault("Retry-After", str(OVERLOADED_RETRY_AFTER))
    return JSONResponse(openai_error_body(err), status_code=err.status, headers=headers)


def openai_error_frame(message: str, code: str | None, param: str | None = None) -> bytes:
    """An SSE frame carrying an OpenAI mid-stream error.

    The payload is ``{"error": {"message", "type": "server_error", "param",
    "code"}}``; the OpenAI SDKs raise ``APIError`` when they read it.
    """
    return sse.json_frame({"error": {"message": message, "type": "server_error", "param": param, "code": code}})


# --- Anthropic ---------------------------------------------------------------------

OVERLOADED_STATUS = 529
"""Anthropic's "overloaded" status; mlxd's 503s are answered with it."""

REQUEST_ID_HEADER = "request-id"
"""The header carrying the ``req_…`` id of every Anthropic answer."""

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def anthropic_status(status: int) -> int:
    """The status Anthropic clients expect for mlxd status ``status``:
    503 becomes 529, everything else is kept."""
    return OVERLOADED_STATUS if status == 503 else status


def anthropic_error_type(status: int) -> str:
    """Anthropic's error ``type`` for an (already mapped) ``status``: the
    documented table; other 5xx are ``api_error``, other 4xx
    ``invalid_request_error``."""
    return _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def anthropic_error_object(status: int, message: str) -> dict[str, str]:
    """The ``{"type", "message"}`` error object for (mapped) ``status``."""
    return {"type": anthropic_error_type(status), "message": message}


def anthropic_error_body(status: int, message: str, request_id: str) -> bytes:
    """The JSON of a non-streamed error answer with (mapped) status ``status``."""
    return msgspec.json.encode(
        {"type": "error", "error": anthropic_error_object(status, message), "request_id": request_id}
    )


def anthropic_error_frame(err: APIError, request_id: str | None = None) -> bytes:
    """The ``event: error`` frame of a mid-stream ``err`` (status mapped as
    for non-streamed errors; the SDK raises ``APIStatusError`` when it reads
    it): an error body like a non-streamed one, whose ``request_id`` is the
    stream's (its ``request-id`` header), or null when not given."""
    error = anthropic_error_object(anthropic_status(err.status), err.message)
    return sse.json_frame({"type": "error", "error": error, "request_id": request_id}, event="error")


def anthropic_error_response(err: APIError) -> Response:
    """The Anthropic-shaped JSON response for ``err``.

    The status is mapped by :func:`anthropic_status` (503 becomes 529); the
    body is :func:`anthropic_error_body` with a fresh ``req_…`` id, also sent
    as the ``request-id`` header; ``Retry-After`` is kept, and a 529 always
    has one. Usable for any failure on a ``/v1/messages`` path (auth, body
    limit, routing).
    """
    status = anthropic_status(err.status)
    request_id = new_id("req_")
    headers = err.headers()
    if status == OVERLOADED_STATUS:
        headers.setdefault("Retry-After", str(OVERLOADED_RETRY_AFTER))
    headers[REQUEST_ID_HEADER] = request_id
    body = anthropic_error_body(status, err.message, request_id)
    return Response(body, status_code=status, media_type=JSON_MEDIA_TYPE, headers=headers)


# --- Ollama ------------------------------------------------------------------------


def ollama_error_body(message: str) -> dict[str, str]:
    """Ollama's error object ``{"error": message}`` (also one line of a
    failed NDJSON stream)."""
    return {"error": message}


def ollama_error_response(err: APIError) -> JSONResponse:
    """``err`` in Ollama's shape: ``{"error": message}`` with its status
    (and ``Retry-After`` when set)."""
    return JSONResponse(ollama_error_body(err.message), status_code=err.status, headers=err.headers())
