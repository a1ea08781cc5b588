"""The gateway's HTTP API as an OpenAPI 3.1 document (``GET /openapi.json``),
assembled from its parts.

Each protocol package describes its own routes and the types they are
generated from, in its ``openapi`` module: :mod:`gateway.openai.openapi`,
:mod:`gateway.responses.openapi`, :mod:`gateway.anthropic.openapi`,
:mod:`gateway.ollama.openapi`, :mod:`gateway.embeddings.openapi`,
:mod:`gateway.rerank.openapi`, :mod:`gateway.speech.openapi`,
:mod:`gateway.transcription.openapi`, :mod:`gateway.mcp.openapi`; the
Operations routes are :mod:`gateway.openapi.operations`. The parts build
with the toolkit of :mod:`gateway.frontend.openapi`. Here
:func:`openapi_document` generates the component schemas of every part's
types (through :class:`~gateway.openapi.schema_views.SchemaViews`) and
puts the path items together, so the document cannot drift from the code
that defines the wire formats:

- Request bodies are the msgspec Structs the routes decode with
  (:class:`~gateway.openai.schema.ChatCompletionRequest`,
  :class:`~gateway.openai.schema.CompletionRequest`,
  :class:`~gateway.responses.schema.ResponsesRequest`,
  :class:`~gateway.anthropic.schema.MessagesRequest`,
  :class:`~gateway.anthropic.schema.CountTokensRequest`,
  :class:`~gateway.speech.schema.SpeechBody`,
  :class:`~gateway.embeddings.schema.EmbeddingRequest`, whose ``input``
  is any JSON value here: its forms are checked after decoding;
  :class:`~gateway.rerank.schema.RerankBody`). Their JSON
  Schema says what the *decoder* accepts: types, bounds, lengths, required and
  unknown fields. The semantic checks that run after decoding (roles, tool
  names referring to tools, a model's ``max_n``, ...) cannot be expressed
  there; such a body is answered with a documented 400.
- Successful non-streamed answers are the Structs the format modules encode
  (:mod:`gateway.openai.format`, :mod:`gateway.responses.format`,
  :mod:`gateway.anthropic.format`,
  :class:`gateway.embeddings.routes.EmbeddingList`,
  :class:`gateway.rerank.routes.RerankResponse`,
  :class:`gateway.speech.routes.VoiceList`; speech audio is binary of its
  format's media type); ``/health`` uses the
  worker status dataclass, ``/v1/status`` and ``/v1/admin/*`` the Structs
  of :mod:`gateway.dashboard.schema`.
- Streamed answers (``"stream": true``) are ``text/event-stream``. Their
  schema describes one parsed event ``{"event", "data", "id"?, "retry"?}``
  whose ``data`` is JSON (``contentMediaType``/``contentSchema``) of the
  shape that event name carries; OpenAI's chat and completions streams
  end with ``data: [DONE]``.
- Every error is documented with the shape the route answers it in: OpenAI
  ``{"error": {"message", "type", "param", "code"}}`` everywhere except
  under ``/v1/messages``, where it is Anthropic's ``{"type": "error",
  "error": {"type", "message"}, "request_id"}`` (backend 503s become 529
  there, and every answer carries a ``request-id`` header), and under
  ``/api/`` (and at ``/``), where it is Ollama's ``{"error": "..."}``.
- The Ollama routes' answers are plain objects (documented as ``object``;
  their fields are in ``docs/api/ollama.md``); their streams are NDJSON.
- Security: a key as ``Authorization: Bearer <key>`` or ``x-api-key``
  (only enforced when the server has keys configured). ``/health`` and
  ``/openapi.json`` are always public; ``/ready`` and ``/metrics`` need a
  key only with ``server.metrics_require_key``.

:func:`openapi_response` is the Starlette endpoint serving the document.
"""

from __future__ import annotations

import asyncio
import functools
from importlib import metadata
from typing import Any, Sequence

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from gateway.anthropic import openapi as anthropic_part
from gateway.embeddings import openapi as embeddings_part
from gateway.frontend import openapi as toolkit
from gateway.frontend.openapi import API_KEY_SCHEME, BEARER_SCHEME, JSON, PathBuilder
from gateway.mcp import openapi as mcp_part
from gateway.ollama import openapi as ollama_part
from gateway.openai import openapi as openai_part
from gateway.openapi import operations
from gateway.openapi.schema_views import SchemaViews
from gateway.rerank import openapi as rerank_part
from gateway.responses import openapi as responses_part
from gateway.speech import openapi as speech_part
from gateway.transcription import openapi as transcription_part

OPENAPI_VERSION = "3.1.0"
"""The OpenAPI version the document follows."""

SCHEMA_REF_PREFIX = "#/components/schemas/"
"""Where component schemas live; every ``$ref`` starts with this."""

EXAMPLE_MODEL = "default"
"""The model named in request examples when no model name is given."""

_TYPED_PARTS = (
    toolkit,
    openai_part,
    responses_part,
    anthropic_part,
    embeddings_part,
    rerank_part,
    speech_part,
    ollama_part,
    operations,
)
"""The parts that bring types; their order and :data:`_SECTIONS` give the
order of the document's component schemas."""

_SECTIONS = ("BODIES", "ANSWERS", "ERRORS", "EVENTS")
"""The tables of types a part may hold (request bodies, answers, error
shapes, stream events), taken section by section across the parts."""


def _types() -> dict[str, Any]:
    """Every type the document is generated from, by the key it is used under."""
    found: dict[str, Any] = {}
    for section in _SECTIONS:
        for part in _TYPED_PARTS:
            found.update(getattr(part, section, {}))
    return found


def _paths(b: PathBuilder, include_openapi_route: bool) -> dict[str, Any]:
    """Every path item, part by part."""
    paths = {
        **openai_part.generation_paths(b),
        **embeddings_part.paths(b),
        **rerank_part.paths(b),
        **speech_part.paths(b),
        **responses_part.paths(b),
        **anthropic_part.paths(b),
        **openai_part.model_paths(b),
        **mcp_part.paths(b),
        **operations.dashboard_paths(b),
        **operations.control_paths(b),
        **operations.probe_paths(b),
        **transcription_part.paths(b),
        **ollama_part.paths(b),
    }
    if include_openapi_route:
        paths.update(operations.document_paths(b))
    return paths


def _package_version() -> str:
    """mlxd's installed version (``0.0.0`` when not installed)."""
    try:
        return metadata.version("mlxd")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def openapi_document(
    model_names: Sequence[str] = (),
    *,
    title: str = "mlxd",
    version: str | None = None,
    include_openapi_route: bool = True,
) -> dict[str, Any]:
    """Return the OpenAPI 3.1 document of the gateway's HTTP API.

    ``model_names`` are the configured models; the first one is named in
    the request examples (:data:`EXAMPLE_MODEL` when there is none). The
    model field itself accepts any name (unknown ones are a documented 404).
    ``version`` defaults to the installed package version.
    ``include_openapi_route`` documents ``GET /openapi.json`` itself.

    The result is a fresh, JSON-serialisable dict (the caller may modify
    it): ``paths`` for every route of :func:`gateway.app.build_app`,
    ``components.schemas`` with one schema per type (every reference is
    ``#/components/schemas/{name}``) and ``components.securitySchemes``.
    """
    types = _types()
    decoded = frozenset().union(*(getattr(part, "DECODED", ()) for part in _TYPED_PARTS))
    views = SchemaViews(types.values())
    keys = list(types)
    schemas, components = msgspec.json.schema_components(
        [views.view(types[key], encoded=key not in decoded) for key in keys],
        ref_template=SCHEMA_REF_PREFIX + "{name}",
    )
    refs = dict(zip(keys, schemas))
    builder = PathBuilder(refs, model_names[0] if model_names else EXAMPLE_MODEL)

    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": title,
            "version": version or _package_version(),
            "description": (
                "OpenAI-, Anthropic- and Ollama-compatible LLM server. Request bodies are decoded strictly: "
                "unknown fields, wrong types and out-of-bounds values are refused with a 400 naming "
                "the field (`error.param`)."
            ),
        },
        "tags": [
            {"name": "OpenAI", "description": "OpenAI-compatible endpoints (OpenAI error shape)"},
            {"name": "Anthropic", "description": "Anthropic Messages API (Anthropic error shape)"},
            {"name": "Ollama", "description": "Ollama-compatible endpoints under /api/ (Ollama error shape)"},
            {"name": "Rerank", "description": "Reranking with cross-encoders (OpenAI error shape)"},
            {"name": "MCP", "description": "Tools of the configured MCP servers (OpenAI error shape)"},
            {"name": "Operations", "description": "Health, readiness, metrics, status, admin actions, dashboard"},
        ],
        "security": [{BEARER_SCHEME: []}, {API_KEY_SCHEME: []}],
        "paths": _paths(builder, include_openapi_route),
        "components": {
            "schemas": components,
            "securitySchemes": {
                BEARER_SCHEME: {"type": "http", "scheme": "bearer", "description": "`Authorization: Bearer <key>`"},
                API_KEY_SCHEME: {"type": "apiKey", "in": "header", "name": "x-api-key"},
            },
        },
    }


@functools.lru_cache(maxsize=8)
def _document_json(model_names: tuple[str, ...]) -> bytes:
    """The encoded document for ``model_names`` (built once per name list)."""
    return msgspec.json.encode(openapi_document(model_names))


async def openapi_response(request: Request) -> Response:
    """``GET /openapi.json``: the document as JSON.

    The examples name the app's configured models (read from
    ``request.app.state.backend`` when it has one). The document is built
    once per list of model names, in a worker thread (it takes long enough
    to stall the event loop), and served from a cache afterwards.
    """
    backend = getattr(request.app.state, "backend", None)
    names = tuple(m.name for m in backend.models()) if backend is not None else ()
    return Response(await asyncio.to_thread(_document_json, names), media_type=JSON)
