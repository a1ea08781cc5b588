"""The Ollama-compatible front-end's part of the OpenAPI document: ``/api/...``
and ``/``, Ollama's error shape and statuses, and the request bodies they
are generated from (the answers are plain objects: their fields are in
``docs/api/ollama.md``; streams are NDJSON).

Assembled with the other parts by :mod:`gateway.openapi_document`.
"""

from __future__ import annotations

from typing import Any, Iterable

from gateway.frontend.openapi import JSON, OPENAI_ERRORS, PathBuilder
from gateway.ollama import schema as ollama_schema
from gateway.ollama.builder import NDJSON_MEDIA_TYPE

BODIES: dict[str, Any] = {
    "ollama_chat_request": ollama_schema.OllamaChatRequest,
    "ollama_generate_request": ollama_schema.OllamaGenerateRequest,
    "ollama_embed_request": ollama_schema.OllamaEmbedRequest,
    "ollama_embeddings_request": ollama_schema.OllamaEmbeddingsRequest,
    "ollama_show_request": ollama_schema.OllamaShowRequest,
}
"""The request bodies the routes decode, by their key in the document's types."""

DECODED = frozenset(BODIES)
"""The keys of this part's types that the server decodes."""

OLLAMA_ERRORS = {
    400: OPENAI_ERRORS[400] + "; also a field mlxd refuses (images, suffix, template, context, ...)",
    401: OPENAI_ERRORS[401],
    404: "Unknown model",
    413: OPENAI_ERRORS[413],
    415: OPENAI_ERRORS[415],
    429: OPENAI_ERRORS[429],
    500: OPENAI_ERRORS[500],
    503: OPENAI_ERRORS[503],
    504: OPENAI_ERRORS[504],
}
"""Ollama-protocol error statuses of the ``/api/`` generation routes."""

OLLAMA_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string", "description": "What went wrong, safe to show"}},
    "additionalProperties": False,
}
"""Ollama's error object (every ``/api/`` route and ``/``)."""

OLLAMA_OBJECT = {"type": "object"}
"""The schema of Ollama's answers (plain dicts built by
:mod:`gateway.ollama.builder`; their fields are listed in
``docs/api/ollama.md``)."""


def _errors(b: PathBuilder, statuses: Iterable[int]) -> dict[str, Any]:
    """Ollama-shaped error responses for ``statuses``."""
    out: dict[str, Any] = {}
    for status in statuses:
        response: dict[str, Any] = {
            "description": OLLAMA_ERRORS.get(status, "Models come from the config"),
            "content": {JSON: {"schema": OLLAMA_ERROR}},
        }
        if status == 401:
            response["headers"] = {"WWW-Authenticate": b.header("The scheme to authenticate with", {"type": "string"})}
        if status in (429, 503):
            response["headers"] = {
                "Retry-After": b.header(
                    "Seconds to wait before retrying", {"type": "integer", "minimum": 0}, status == 429
                )
            }
        out[str(status)] = response
    return out


def _post(
    b: PathBuilder, operation_id: str, summary: str, body: str, example: dict[str, Any], description: str, streams: bool
) -> dict[str, Any]:
    """A ``POST`` Ollama operation whose answer is a JSON object (or,
    when it ``streams``, NDJSON objects by default)."""
    content: dict[str, Any] = {JSON: {"schema": OLLAMA_OBJECT}}
    if streams:
        content[NDJSON_MEDIA_TYPE] = {"schema": {"type": "string", "description": "One JSON object per line"}}
    return {
        "post": {
            "operationId": operation_id,
            "summary": summary,
            "tags": ["Ollama"],
            "requestBody": b.body(body, example, False),
            "responses": {
                "200": {"description": description, "content": content},
                **_errors(b, OLLAMA_ERRORS),
            },
        }
    }


def _get(b: PathBuilder, operation_id: str, summary: str, public: bool = False) -> dict[str, Any]:
    """A ``GET`` Ollama listing operation."""
    operation: dict[str, Any] = {
        "operationId": operation_id,
        "summary": summary,
        "tags": ["Ollama"],
        "responses": {
            "200": {"description": summary, "content": {JSON: {"schema": OLLAMA_OBJECT}}},
            **({} if public else _errors(b, [401])),
        },
    }
    if public:
        operation["security"] = []
    return {"get": operation}


def paths(b: PathBuilder) -> dict[str, Any]:
    """The Ollama-compatible path items (``/api/...`` and ``/``)."""
    model = b.model
    message = [{"role": "user", "content": "Hello"}]
    few = {"num_predict": 8}
    paths: dict[str, Any] = {
        "/": {
            "get": {
                "operationId": "ollamaRoot",
                "summary": "Ollama probe: `Ollama is running`",
                "tags": ["Ollama"],
                "security": [],
                "responses": {
                    "200": {
                        "description": "The server runs",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        "/api/version": _get(b, "ollamaVersion", "The Ollama API version mlxd speaks", public=True),
        "/api/tags": _get(b, "ollamaListModels", "The configured models (Ollama)"),
        "/api/ps": _get(b, "ollamaRunningModels", "The loaded models, memory and expiry (Ollama)"),
        "/api/show": _post(
            b,
            "ollamaShowModel",
            "One model's details, template and capabilities (Ollama)",
            "ollama_show_request",
            {"model": model},
            "The model's details",
            False,
        ),
        "/api/chat": _post(
            b,
            "ollamaChat",
            "Chat (Ollama)",
            "ollama_chat_request",
            {"model": model, "messages": message, "stream": False, "options": few},
            "A chat object, or (`stream` defaults to true) NDJSON chat objects ending with `done: true`",
            True,
        ),
        "/api/generate": _post(
            b,
            "ollamaGenerate",
            "Generate a completion (Ollama)",
            "ollama_generate_request",
            {"model": model, "prompt": "Once upon a time", "stream": False, "options": few},
            "A generate object, or (`stream` defaults to true) NDJSON objects ending with `done: true`",
            True,
        ),
        "/api/embed": _post(
            b,
            "ollamaEmbed",
            "Embed texts (Ollama); needs an embedding model",
            "ollama_embed_request",
            {"model": model, "input": ["Hello"]},
            "One vector per input",
            False,
        ),
        "/api/embeddings": _post(
            b,
            "ollamaEmbeddings",
            "Embed one prompt (Ollama, older form); needs an embedding model",
            "ollama_embeddings_request",
            {"model": model, "prompt": "Hello"},
            "The prompt's vector",
            False,
        ),
    }
    managed = {
        "pull": "Download a model from the Hugging Face Hub and serve it (Ollama `pull`; streamed progress "
        "unless `stream` is false) when `server.allow_model_management` is set, else refused",
        "delete": "Remove a pulled model from the local cache (Ollama `delete`) when "
        "`server.allow_model_management` is set, else refused",
    }
    for name, method in (
        ("pull", "post"),
        ("delete", "delete"),
        ("push", "post"),
        ("create", "post"),
        ("copy", "post"),
    ):
        operation = {
            "operationId": f"ollama{name.capitalize()}",
            "summary": managed.get(name, f"Refused: models come from the config or a pull (Ollama `{name}`)"),
            "tags": ["Ollama"],
            "responses": _errors(b, [400, 401, 403, 404] if name in managed else [401, 403]),
        }
        if name in managed:
            operation["responses"]["200"] = {"description": "Done (for a pull: NDJSON progress lines)"}
        paths[f"/api/{name}"] = {method: operation}
    return paths
