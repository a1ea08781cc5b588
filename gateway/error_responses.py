"""One place that picks an error's wire shape from the route it answers.

Routes under ``/v1/messages`` speak Anthropic's protocol, so their errors
(including authentication, body-size and routing errors raised before any
handler runs) use Anthropic's error object and status mapping; every other
route uses OpenAI's, except the Ollama-compatible routes (``/`` and
``/api/...``), whose errors are Ollama's ``{"error": "..."}``.
"""

from __future__ import annotations

from starlette.responses import Response

from gateway.errors import APIError

ANTHROPIC_PREFIX = "/v1/messages"


def is_anthropic_path(path: str) -> bool:
    """Whether ``path`` belongs to the Anthropic Messages API."""
    return path == ANTHROPIC_PREFIX or path.startswith(ANTHROPIC_PREFIX + "/")


def is_ollama_path(path: str) -> bool:
    """Whether ``path`` belongs to the Ollama-compatible API."""
    return path == "/" or path == "/api" or path.startswith("/api/")


def error_response_for(path: str, err: APIError) -> Response:
    """The response for ``err`` in the protocol of the route at ``path``."""
    if is_ollama_path(path):
        from gateway.ollama_routes import ollama_error_response

        return ollama_error_response(err)
    if is_anthropic_path(path):
        from gateway.anthropic_routes import anthropic_error_response

        return anthropic_error_response(err)
    from gateway.openai_routes import error_response

    return error_response(err)
