"""The gateway's HTTP API as an OpenAPI 3.1 document (``GET /openapi.json``).

:func:`openapi_document` builds the document from the code that defines the
wire formats, so it cannot drift from them:

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

msgspec cannot generate schemas for two things these Structs use, so the
document is generated from *schema views*: mirror Structs built by
:class:`_SchemaViews` with the same names, fields, bounds, defaults and
docstrings, in which a ``msgspec.Raw`` field (any JSON value; its default
``null``) becomes ``Any`` with default ``None``, and an untagged union of
Structs (e.g. a response's ``output`` items) becomes a union tagged by the
members' constant ``type`` field, which every member always encodes. The
views are used for the document only, never for decoding.

:func:`openapi_response` is the Starlette endpoint serving the document.

Long on purpose (the ~500-line rule's declarative exception): most of the
module is the route table of :class:`_Builder`, one declarative entry per
route (its summary, body, answers and error statuses); the logic is the
short schema walk of :class:`_SchemaViews` and the assembly in
:func:`openapi_document`.
"""

from __future__ import annotations

import asyncio
import functools
import types
import typing
from importlib import metadata
from typing import Annotated, Any, Iterable, Literal, Sequence, Union

import msgspec
from msgspec import NODEFAULT, Raw
from starlette.requests import Request
from starlette.responses import Response

from gateway.anthropic import format as anthropic_format
from gateway.anthropic.schema import CountTokensRequest, MessagesRequest
from gateway.control.schema import CacheCleared, CacheStats, RequestCancelled
from gateway.dashboard.schema import ActionResult, ModelAction, Status
from gateway.embeddings.routes import EmbeddingList
from gateway.embeddings.schema import EmbeddingRequest
from gateway.frontend.sse import MEDIA_TYPE as SSE_MEDIA_TYPE
from gateway.ollama import schema as ollama_schema
from gateway.ollama.builder import NDJSON_MEDIA_TYPE
from gateway.openai import format as openai_format
from gateway.openai.schema import ChatCompletionRequest, CompletionRequest
from gateway.rerank.routes import RerankResponse
from gateway.rerank.schema import RerankBody
from gateway.responses import format as responses_format
from gateway.responses.schema import ResponsesRequest
from gateway.speech import routes as speech_routes
from gateway.speech.schema import SpeechBody
from gateway.workers.status import WorkerStatus

OPENAPI_VERSION = "3.1.0"
"""The OpenAPI version the document follows."""

SCHEMA_REF_PREFIX = "#/components/schemas/"
"""Where component schemas live; every ``$ref`` starts with this."""

JSON = "application/json"
"""The media type of every JSON body."""

METRICS_MEDIA_TYPE = "text/plain"
"""The media type of ``GET /metrics`` (Prometheus text exposition)."""

BEARER_SCHEME = "bearerAuth"
"""Security scheme: ``Authorization: Bearer <key>``."""

API_KEY_SCHEME = "apiKeyHeader"
"""Security scheme: ``x-api-key: <key>`` (what the Anthropic SDKs send)."""

EXAMPLE_MODEL = "default"
"""The model named in request examples when no model name is given."""

DONE_DATA = "[DONE]"
"""The ``data`` of the frame that ends an OpenAI chat/completions stream."""


# --- documentation-only bodies -------------------------------------------------------------
# The routes build these as plain dicts; the Structs below describe them.


class OpenAIErrorDetail(msgspec.Struct, kw_only=True):
    """The ``error`` object of an OpenAI error: a client-safe ``message``,
    its ``type`` (e.g. ``invalid_request_error``), the offending request
    field ``param`` (a path such as ``messages[0].content``) and a short
    machine-readable ``code`` (e.g. ``model_not_found``)."""

    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIError(msgspec.Struct, kw_only=True):
    """An error answered by an OpenAI-protocol route (every route outside
    ``/v1/messages``), also as the data of a mid-stream error frame."""

    error: OpenAIErrorDetail


class AnthropicErrorDetail(msgspec.Struct, kw_only=True):
    """The ``error`` object of an Anthropic error: its ``type`` (e.g.
    ``invalid_request_error``, ``overloaded_error``) and ``message``."""

    type: str
    message: str


class AnthropicError(msgspec.Struct, kw_only=True):
    """An error answered by a ``/v1/messages`` route; ``request_id``
    equals the ``request-id`` header."""

    type: Literal["error"]
    error: AnthropicErrorDetail
    request_id: str


class AnthropicStreamError(msgspec.Struct, kw_only=True):
    """The data of an Anthropic ``event: error`` frame (mid-stream error)."""

    type: Literal["error"]
    error: AnthropicErrorDetail


class TokenCount(msgspec.Struct, kw_only=True):
    """The ``POST /v1/messages/count_tokens`` answer: how many tokens the
    request's prompt (system, messages, tools) renders to."""

    input_tokens: int


class Health(msgspec.Struct, kw_only=True):
    """The ``GET /health`` body: the gateway's state and each configured
    model's worker status."""

    status: Literal["ok", "draining"]
    models: dict[str, WorkerStatus]


class Readiness(msgspec.Struct, kw_only=True):
    """The ``GET /ready`` body: whether every preloaded model is ready, and
    each model's worker state."""

    ready: bool
    models: dict[str, str]


# --- schema views ---------------------------------------------------------------------------


def _is_struct(tp: Any) -> bool:
    """Whether ``tp`` is a msgspec Struct class."""
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


def _is_union(tp: Any) -> bool:
    """Whether ``tp`` is a ``Union[...]`` / ``X | Y`` type."""
    return typing.get_origin(tp) in (Union, types.UnionType)


def _structs(members: Iterable[Any]) -> list[type]:
    """The Struct classes among union ``members`` (``Annotated`` wrappers
    looked through)."""
    found = []
    for member in members:
        while typing.get_origin(member) is Annotated:
            member = typing.get_args(member)[0]
        if _is_struct(member):
            found.append(member)
    return found


def _untagged_structs(members: Iterable[Any]) -> list[type]:
    """The Struct classes among union ``members`` that are object-like and
    carry no tag."""
    return [
        cls
        for cls in _structs(members)
        if cls.__struct_config__.tag is None and not cls.__struct_config__.array_like  # type: ignore[attr-defined]
    ]


class _SchemaViews:
    """Mirror types of Structs that msgspec can generate JSON Schema for.

    ``view(tp, encoded)`` returns ``tp`` with every Struct replaced by its
    view, built once per class and use:

    - ``Raw`` becomes ``Any`` (a ``Raw`` default: the value it encodes);
    - a Struct that is a member of an untagged union of two or more Structs
      anywhere under ``roots`` (found by the constructor's walk) gets
      ``tag_field="type"``, its tag being its ``type`` field's string
      default;
    - ``encoded`` (a type the server only sends): every field is required,
      as msgspec always encodes it, unless the Struct has
      ``omit_defaults``;
    - decoded (a type the server only reads): a tagged Struct that is not
      one of several Structs of a union keeps its tag as an optional field
      (``<Name>Standalone``), as msgspec requires the tag only to choose
      among Structs.

    Raises (from ``view``):
        TypeError: a Struct in an untagged union has no ``type`` field with a
        string default, so no tag can be derived.
    """

    TAG_FIELD = "type"

    def __init__(self, roots: Iterable[Any]) -> None:
        self._tagged: set[type] = set()
        self._views: dict[tuple[type, str], Any] = {}
        seen: set[type] = set()
        for root in roots:
            self._find_untagged_unions(root, seen)

    def _find_untagged_unions(self, tp: Any, seen: set[type]) -> None:
        """Record in ``self._tagged`` the members of untagged Struct unions
        reachable from ``tp``."""
        if _is_struct(tp):
            if tp in seen:
                return
            seen.add(tp)
            for info in msgspec.structs.fields(tp):
                self._find_untagged_unions(info.type, seen)
            return
        args = typing.get_args(tp)
        if _is_union(tp):
            members = _untagged_structs(args)
            if len(members) >= 2:
                self._tagged.update(members)
        if typing.get_origin(tp) is Annotated:
            args = args[:1]
        for arg in args:
            self._find_untagged_unions(arg, seen)

    def view(self, tp: Any, encoded: bool, in_union: bool = False) -> Any:
        """``tp`` with Structs replaced by their views and ``Raw`` by ``Any``
        (``in_union``: ``tp`` is one of several Structs of a union, where
        msgspec needs the tag to tell them apart)."""
        if tp is Raw:
            return Any
        if _is_struct(tp):
            return self._struct_view(tp, encoded, in_union)
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is None or not args:
            return tp
        if origin is Annotated:
            return Annotated[(self.view(args[0], encoded, in_union), *tp.__metadata__)]  # type: ignore[misc]
        if origin is Literal:
            return tp
        union = _is_union(tp)
        several = union and len(_structs(args)) >= 2
        viewed = tuple(self.view(arg, encoded, several) for arg in args)
        if union:
            return Union[viewed]  # type: ignore[return-value]
        return origin[viewed if len(viewed) > 1 else viewed[0]]

    def _struct_view(self, cls: type, encoded: bool, in_union: bool) -> Any:
        """The (cached) view of Struct ``cls`` for this use."""
        config = cls.__struct_config__  # type: ignore[attr-defined]
        tag_field, tag = config.tag_field, config.tag
        standalone = not encoded and tag is not None and not in_union
        use = "encoded" if encoded else "standalone" if standalone else "decoded"
        cached = self._views.get((cls, use))
        if cached is not None:
            return cached
        fields = list(msgspec.structs.fields(cls))  # type: ignore[arg-type]
        name = cls.__name__
        if cls in self._tagged:
            tag_field, tag = self.TAG_FIELD, self._constant_type(cls, fields)
            fields = [f for f in fields if f.name != self.TAG_FIELD]
        # A placeholder first, so that self-referencing Structs terminate.
        self._views[(cls, use)] = Any
        specs = [self._field_spec(f, encoded, encoded and not config.omit_defaults) for f in fields]
        if standalone:
            specs.insert(0, (tag_field, Literal[tag], tag))
            name, tag_field, tag = name + "Standalone", None, None
        view = msgspec.defstruct(
            name,
            specs,
            module=cls.__module__,
            kw_only=True,
            omit_defaults=config.omit_defaults,
            forbid_unknown_fields=config.forbid_unknown_fields,
            tag_field=tag_field,
            tag=tag,
            rename={f.name: f.encode_name for f in fields if f.name != f.encode_name} or None,
        )
        view.__doc__ = cls.__doc__
        if standalone:
            view.__doc__ = (cls.__doc__ or "") + "\n\nOutside a union the type tag may be left out."
        self._views[(cls, use)] = view
        return view

    def _constant_type(self, cls: type, fields: list[msgspec.structs.FieldInfo]) -> str:
        """The string default of ``cls``'s ``type`` field (its tag)."""
        for info in fields:
            if info.name == self.TAG_FIELD and isinstance(info.default, str):
                return info.default
        raise TypeError(
            f"{cls.__qualname__} is a member of an untagged Struct union but has no "
            f"'{self.TAG_FIELD}' field with a string default to document it by"
        )

    def _field_spec(self, info: msgspec.structs.FieldInfo, encoded: bool, always_present: bool) -> tuple[Any, ...]:
        """A ``defstruct`` field spec mirroring ``info``: its type viewed
        (``encoded`` as its Struct), a ``Raw`` default decoded to the value
        it stands for, and no default at all when the field is
        ``always_present`` (never for an ``UNSET`` default: msgspec leaves
        such a field out)."""
        tp = self.view(info.type, encoded)
        if always_present and info.default is not msgspec.UNSET:
            return (info.name, tp)
        if info.default is not NODEFAULT:
            default = info.default
            if isinstance(default, Raw):
                default = msgspec.json.decode(bytes(default))
            return (info.name, tp, default)
        if info.default_factory is not NODEFAULT:
            return (info.name, tp, msgspec.field(default_factory=info.default_factory))
        return (info.name, tp)


# --- the document ----------------------------------------------------------------------------

_TYPES: dict[str, Any] = {
    # request bodies
    "chat_request": ChatCompletionRequest,
    "completion_request": CompletionRequest,
    "responses_request": ResponsesRequest,
    "messages_request": MessagesRequest,
    "count_tokens_request": CountTokensRequest,
    "embedding_request": EmbeddingRequest,
    "rerank_request": RerankBody,
    "speech_request": SpeechBody,
    "ollama_chat_request": ollama_schema.OllamaChatRequest,
    "ollama_generate_request": ollama_schema.OllamaGenerateRequest,
    "ollama_embed_request": ollama_schema.OllamaEmbedRequest,
    "ollama_embeddings_request": ollama_schema.OllamaEmbeddingsRequest,
    "ollama_show_request": ollama_schema.OllamaShowRequest,
    # successful answers
    "chat_completion": openai_format.ChatCompletion,
    "text_completion": openai_format.TextCompletion,
    "completion_choice": openai_format.CompletionChoice,
    "chat_logprobs": openai_format.ChatLogprobs,
    "openai_usage": openai_format.Usage,
    "model_list": openai_format.ModelList,
    "model": openai_format.ModelCard,
    "response": responses_format.ResponseBody,
    "message": anthropic_format.Message,
    "anthropic_usage": anthropic_format.Usage,
    "anthropic_delta_usage": anthropic_format.DeltaUsage,
    "content_block": anthropic_format.ContentBlock,
    "token_count": TokenCount,
    "embedding_list": EmbeddingList,
    "rerank_response": RerankResponse,
    "voice_list": speech_routes.VoiceList,
    "speech_audio_delta": speech_routes.SpeechAudioDelta,
    "speech_audio_done": speech_routes.SpeechAudioDone,
    "health": Health,
    "readiness": Readiness,
    "status": Status,
    "cache_stats": CacheStats,
    "cache_cleared": CacheCleared,
    "request_cancelled": RequestCancelled,
    "admin_action": ActionResult,
    "model_action": ModelAction,
    # errors
    "openai_error": OpenAIError,
    "anthropic_error": AnthropicError,
    "anthropic_stream_error": AnthropicStreamError,
    # Responses stream events (see _RESPONSES_EVENTS)
    "lifecycle_event": responses_format.LifecycleEvent,
    "item_event": responses_format.ItemEvent,
    "part_event": responses_format.PartEvent,
    "text_delta_event": responses_format.TextDeltaEvent,
    "text_done_event": responses_format.TextDoneEvent,
    "reasoning_delta_event": responses_format.ReasoningDeltaEvent,
    "reasoning_done_event": responses_format.ReasoningDoneEvent,
    "arguments_delta_event": responses_format.ArgumentsDeltaEvent,
    "arguments_done_event": responses_format.ArgumentsDoneEvent,
    "error_event": responses_format.ErrorEvent,
}
"""Every type the document is generated from, by the key it is used under."""

_DECODED = frozenset(
    {
        "chat_request",
        "completion_request",
        "responses_request",
        "messages_request",
        "count_tokens_request",
        "embedding_request",
        "rerank_request",
        "speech_request",
        "ollama_chat_request",
        "ollama_generate_request",
        "ollama_embed_request",
        "ollama_embeddings_request",
        "ollama_show_request",
        "model_action",
    }
)
"""The keys of :data:`_TYPES` the server decodes; it encodes all the others."""

_RESPONSES_EVENTS: dict[str, str] = {
    "response.created": "lifecycle_event",
    "response.in_progress": "lifecycle_event",
    "response.completed": "lifecycle_event",
    "response.incomplete": "lifecycle_event",
    "response.failed": "lifecycle_event",
    "response.output_item.added": "item_event",
    "response.output_item.done": "item_event",
    "response.content_part.added": "part_event",
    "response.content_part.done": "part_event",
    "response.output_text.delta": "text_delta_event",
    "response.output_text.done": "text_done_event",
    "response.reasoning_text.delta": "reasoning_delta_event",
    "response.reasoning_text.done": "reasoning_done_event",
    "response.function_call_arguments.delta": "arguments_delta_event",
    "response.function_call_arguments.done": "arguments_done_event",
    "error": "error_event",
}
"""Responses stream: event name -> the key of its data's type in :data:`_TYPES`
(the data's ``type`` equals the event name)."""

_OPENAI_ERRORS = {
    400: "Invalid request: malformed JSON, a field of the wrong type or out of bounds, an unknown "
    "field, an unsupported feature, or a prompt longer than the model's context",
    401: "Missing or invalid API key",
    404: "Unknown model (`model_not_found`)",
    413: "Request body larger than `server.max_body_bytes`",
    415: "Unsupported request content type",
    429: "Over a limit of the API key (`server.api_keys`: requests or tokens per minute, concurrent requests); "
    "retry after `Retry-After`",
    500: "Internal error",
    503: "The model is not ready, overloaded or the request was aborted; retry after `Retry-After`",
    504: "The request ran past its deadline",
}
"""OpenAI-protocol error statuses of a generation route, with their meaning."""

_ANTHROPIC_ERRORS = {
    400: _OPENAI_ERRORS[400],
    401: _OPENAI_ERRORS[401],
    404: _OPENAI_ERRORS[404],
    413: _OPENAI_ERRORS[413],
    415: _OPENAI_ERRORS[415],
    429: _OPENAI_ERRORS[429],
    500: _OPENAI_ERRORS[500],
    504: _OPENAI_ERRORS[504],
    529: "Overloaded: the model is not ready, its queue is full or the request was aborted; retry after `Retry-After`",
}
"""Anthropic-protocol error statuses of the ``/v1/messages`` routes."""


_OLLAMA_ERRORS = {
    400: _OPENAI_ERRORS[400] + "; also a field mlxd refuses (images, suffix, template, context, ...)",
    401: _OPENAI_ERRORS[401],
    404: "Unknown model",
    413: _OPENAI_ERRORS[413],
    415: _OPENAI_ERRORS[415],
    429: _OPENAI_ERRORS[429],
    500: _OPENAI_ERRORS[500],
    503: _OPENAI_ERRORS[503],
    504: _OPENAI_ERRORS[504],
}
"""Ollama-protocol error statuses of the ``/api/`` generation routes."""

OLLAMA_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string", "description": "What went wrong, safe to show"}},
    "additionalProperties": False,
}
"""Ollama's error object (every ``/api/`` route and ``/``)."""

_OLLAMA_OBJECT = {"type": "object"}
"""The schema of Ollama's answers (plain dicts built by
:mod:`gateway.ollama.builder`; their fields are listed in
``docs/api/ollama.md``)."""


class _Builder:
    """Assembles the document from the generated schemas (``refs``: key of
    :data:`_TYPES` -> its schema, a ``$ref`` for Structs)."""

    def __init__(self, refs: dict[str, dict[str, Any]], example_model: str) -> None:
        self.refs = refs
        self.model = example_model

    # -- responses --

    @staticmethod
    def _header(description: str, schema: dict[str, Any], required: bool = False) -> dict[str, Any]:
        """A response header object."""
        return {"description": description, "required": required, "schema": schema}

    def _error_responses(self, statuses: dict[int, str], anthropic: bool) -> dict[str, Any]:
        """Error response objects for ``statuses`` in the route's protocol."""
        schema = self.refs["anthropic_error" if anthropic else "openai_error"]
        out: dict[str, Any] = {}
        for status, description in statuses.items():
            headers: dict[str, Any] = {}
            if anthropic:
                headers["request-id"] = self._header(
                    "The id of this answer (equal to the body's `request_id`)", {"type": "string"}, True
                )
            if status == 401:
                headers["WWW-Authenticate"] = self._header("The scheme to authenticate with", {"type": "string"})
            if status in (429, 503, 529):
                headers["Retry-After"] = self._header(
                    "Seconds to wait before retrying", {"type": "integer", "minimum": 0}, anthropic or status == 429
                )
            response: dict[str, Any] = {"description": description, "content": {JSON: {"schema": schema}}}
            if headers:
                response["headers"] = headers
            out[str(status)] = response
        return out

    @staticmethod
    def _sse_event(event_names: dict[str, dict[str, Any]] | None, data: dict[str, Any]) -> dict[str, Any]:
        """The schema of one parsed SSE event.

        ``event_names`` maps each event name to the schema of its JSON
        data; when None the event carries no name (``message``) and ``data``
        is the schema of its whole ``data`` string.
        """
        event: dict[str, Any] = {
            "type": "object",
            "required": ["event", "data"],
            "properties": {
                "event": {"type": "string"},
                "data": {"type": "string"},
                "id": {"type": "string"},
                "retry": {"type": "integer", "minimum": 0},
            },
        }
        if event_names is None:
            event["properties"]["event"] = {"const": "message"}
            event["properties"]["data"] = data
            return event
        event["properties"]["event"] = {"enum": list(event_names)}
        event["allOf"] = [
            {
                "if": {"properties": {"event": {"const": name}}},
                "then": {"properties": {"data": _json_text(schema)}},
            }
            for name, schema in event_names.items()
        ]
        return event

    def _openai_stream(self, chunk: dict[str, Any]) -> dict[str, Any]:
        """An OpenAI chat/completions stream event: a ``chunk``, an error
        frame, or the final ``[DONE]``."""
        payload = {"anyOf": [chunk, self.refs["openai_error"]]}
        data = {"type": "string", "if": {"const": DONE_DATA}, "else": _json_text(payload)}
        return self._sse_event(None, data)

    def _ok(
        self,
        description: str,
        json_schema: dict[str, Any],
        sse: dict[str, Any] | None = None,
        headers: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A 200 response object (JSON, plus SSE when ``sse`` is given)."""
        content: dict[str, Any] = {JSON: {"schema": json_schema}}
        if sse is not None:
            content[SSE_MEDIA_TYPE] = {"schema": sse}
        response: dict[str, Any] = {"description": description, "content": content}
        if headers:
            response["headers"] = headers
        return {"200": response}

    # -- stream chunk schemas (built as bytes by the format modules, so no Structs) --

    def _chunk(self, obj: str, choice: dict[str, Any]) -> dict[str, Any]:
        """An OpenAI stream chunk whose ``object`` is ``obj`` and whose
        ``choices`` items follow ``choice`` (the usage chunk has none)."""
        return {
            "type": "object",
            "required": ["id", "object", "created", "model", "choices"],
            "properties": {
                "id": {"type": "string"},
                "object": {"const": obj},
                "created": {"type": "integer"},
                "model": {"type": "string"},
                "choices": {"type": "array", "items": choice},
                "usage": {"anyOf": [self.refs["openai_usage"], {"type": "null"}]},
            },
        }

    def chat_chunk(self) -> dict[str, Any]:
        """A ``chat.completion.chunk``."""
        tool_call = {
            "type": "object",
            "required": ["index"],
            "properties": {
                "index": {"type": "integer", "minimum": 0},
                "id": {"type": "string"},
                "type": {"const": "function"},
                "function": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}},
                },
            },
        }
        delta = {
            "type": "object",
            "properties": {
                "role": {"const": "assistant"},
                "content": {"type": ["string", "null"]},
                "reasoning_content": {"type": "string"},
                "reasoning": {"type": "string"},
                "tool_calls": {"type": "array", "items": tool_call},
            },
        }
        choice = {
            "type": "object",
            "required": ["index", "delta", "finish_reason"],
            "properties": {
                "index": {"type": "integer", "minimum": 0},
                "delta": delta,
                "logprobs": {"anyOf": [self.refs["chat_logprobs"], {"type": "null"}]},
                "finish_reason": {"enum": ["stop", "length", "tool_calls", None]},
            },
        }
        return self._chunk("chat.completion.chunk", choice)

    def completion_chunk(self) -> dict[str, Any]:
        """A streamed ``text_completion`` chunk."""
        return self._chunk("text_completion", self.refs["completion_choice"])

    def anthropic_events(self) -> dict[str, dict[str, Any]]:
        """Anthropic stream: event name -> the schema of its data."""

        def event(name: str, required: dict[str, Any]) -> dict[str, Any]:
            properties = {"type": {"const": name}, **required}
            return {"type": "object", "required": list(properties), "properties": properties}

        index = {"type": "integer", "minimum": 0}
        delta = {
            "type": "object",
            "required": ["type"],
            "properties": {
                "type": {"enum": ["text_delta", "thinking_delta", "input_json_delta", "signature_delta"]},
                "text": {"type": "string"},
                "thinking": {"type": "string"},
                "partial_json": {"type": "string"},
                "signature": {"type": "string"},
            },
        }
        stop = {
            "type": "object",
            "required": ["stop_reason", "stop_sequence"],
            "properties": {
                "stop_reason": {"enum": ["end_turn", "max_tokens", "stop_sequence", "tool_use"]},
                "stop_sequence": {"type": ["string", "null"]},
                "stop_details": {"type": "null"},
                "container": {"type": "null"},
            },
        }
        return {
            "message_start": event("message_start", {"message": self.refs["message"]}),
            "ping": event("ping", {}),
            "content_block_start": event(
                "content_block_start", {"index": index, "content_block": self.refs["content_block"]}
            ),
            "content_block_delta": event("content_block_delta", {"index": index, "delta": delta}),
            "content_block_stop": event("content_block_stop", {"index": index}),
            "message_delta": event("message_delta", {"delta": stop, "usage": self.refs["anthropic_delta_usage"]}),
            "message_stop": event("message_stop", {}),
            "error": self.refs["anthropic_stream_error"],
        }

    def responses_events(self) -> dict[str, dict[str, Any]]:
        """Responses stream: event name -> the schema of its data."""
        return {
            name: {"allOf": [self.refs[key], {"properties": {"type": {"const": name}}}]}
            for name, key in _RESPONSES_EVENTS.items()
        }

    # -- operations --

    def _body(self, key: str, example: dict[str, Any], streams: bool) -> dict[str, Any]:
        """A required JSON request body of type ``key`` with ``example``,
        plus the same example streamed when the operation ``streams``."""
        examples = {"minimal": {"summary": "A short answer", "value": example}}
        if streams:
            examples["streamed"] = {"summary": "The same, streamed", "value": {**example, "stream": True}}
        return {"required": True, "content": {JSON: {"schema": self.refs[key], "examples": examples}}}

    def generation(
        self,
        *,
        operation_id: str,
        summary: str,
        tag: str,
        body: str,
        example: dict[str, Any],
        ok: dict[str, Any],
        anthropic: bool = False,
    ) -> dict[str, Any]:
        """A ``POST`` generation operation."""
        errors = _ANTHROPIC_ERRORS if anthropic else _OPENAI_ERRORS
        return {
            "operationId": operation_id,
            "summary": summary,
            "tags": [tag],
            "requestBody": self._body(body, example, SSE_MEDIA_TYPE in ok["200"]["content"]),
            "responses": {**ok, **self._error_responses(errors, anthropic)},
        }

    def speech_paths(self) -> dict[str, Any]:
        """``POST /v1/audio/speech`` (audio of each format, or SSE with
        ``stream_format: "sse"``) and ``GET /v1/audio/voices``."""
        audio = {"type": "string", "contentEncoding": "binary"}
        content: dict[str, Any] = {media: {"schema": audio} for media in speech_routes.MEDIA_TYPES.values()}
        payload = {
            "anyOf": [self.refs["speech_audio_delta"], self.refs["speech_audio_done"], self.refs["openai_error"]]
        }
        content[SSE_MEDIA_TYPE] = {"schema": self._sse_event(None, _json_text(payload))}
        example = {"model": self.model, "input": "Good morning.", "voice": "af_heart", "response_format": "wav"}
        return {
            "/v1/audio/speech": {
                "post": {
                    "operationId": "createSpeech",
                    "summary": "Text to speech (OpenAI); needs a speech model",
                    "tags": ["OpenAI"],
                    "requestBody": {
                        "required": True,
                        "content": {
                            JSON: {
                                "schema": self.refs["speech_request"],
                                "examples": {
                                    "whole": {"summary": "A wav file", "value": example},
                                    "streamed": {
                                        "summary": "Audio as it is synthesised",
                                        "value": {**example, "stream_format": "audio"},
                                    },
                                },
                            }
                        },
                    },
                    "responses": {
                        "200": {
                            "description": "The audio in `response_format` (whole, or streamed with "
                            "`stream_format: audio`), or with `stream_format: sse` `speech.audio.delta` "
                            "events and a last `speech.audio.done`",
                            "content": content,
                        },
                        **self._error_responses(_OPENAI_ERRORS, False),
                    },
                }
            },
            "/v1/audio/voices": {
                "get": {
                    "operationId": "listVoices",
                    "summary": "The voices of the speech models (`?model=` for one)",
                    "tags": ["OpenAI"],
                    "parameters": [
                        {
                            "name": "model",
                            "in": "query",
                            "required": False,
                            "description": "A speech model's name or alias",
                            "schema": {"type": "string", "minLength": 1},
                        }
                    ],
                    "responses": {
                        **self._ok("The voices, as `audio.voice` objects with their `model`", self.refs["voice_list"]),
                        **self._error_responses({s: _OPENAI_ERRORS[s] for s in (400, 401, 404)}, False),
                    },
                }
            },
        }

    def _ollama_errors(self, statuses: Iterable[int]) -> dict[str, Any]:
        """Ollama-shaped error responses for ``statuses``."""
        out: dict[str, Any] = {}
        for status in statuses:
            response: dict[str, Any] = {
                "description": _OLLAMA_ERRORS.get(status, "Models come from the config"),
                "content": {JSON: {"schema": OLLAMA_ERROR}},
            }
            if status == 401:
                response["headers"] = {
                    "WWW-Authenticate": self._header("The scheme to authenticate with", {"type": "string"})
                }
            if status in (429, 503):
                response["headers"] = {
                    "Retry-After": self._header(
                        "Seconds to wait before retrying", {"type": "integer", "minimum": 0}, status == 429
                    )
                }
            out[str(status)] = response
        return out

    def _ollama_post(
        self, operation_id: str, summary: str, body: str, example: dict[str, Any], description: str, streams: bool
    ) -> dict[str, Any]:
        """A ``POST`` Ollama operation whose answer is a JSON object (or,
        when it ``streams``, NDJSON objects by default)."""
        content: dict[str, Any] = {JSON: {"schema": _OLLAMA_OBJECT}}
        if streams:
            content[NDJSON_MEDIA_TYPE] = {"schema": {"type": "string", "description": "One JSON object per line"}}
        return {
            "post": {
                "operationId": operation_id,
                "summary": summary,
                "tags": ["Ollama"],
                "requestBody": self._body(body, example, False),
                "responses": {
                    "200": {"description": description, "content": content},
                    **self._ollama_errors(_OLLAMA_ERRORS),
                },
            }
        }

    def _ollama_get(self, operation_id: str, summary: str, public: bool = False) -> dict[str, Any]:
        """A ``GET`` Ollama listing operation."""
        operation: dict[str, Any] = {
            "operationId": operation_id,
            "summary": summary,
            "tags": ["Ollama"],
            "responses": {
                "200": {"description": summary, "content": {JSON: {"schema": _OLLAMA_OBJECT}}},
                **({} if public else self._ollama_errors([401])),
            },
        }
        if public:
            operation["security"] = []
        return {"get": operation}

    def ollama_paths(self) -> dict[str, Any]:
        """The Ollama-compatible path items (``/api/...`` and ``/``)."""
        model = self.model
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
            "/api/version": self._ollama_get("ollamaVersion", "The Ollama API version mlxd speaks", public=True),
            "/api/tags": self._ollama_get("ollamaListModels", "The configured models (Ollama)"),
            "/api/ps": self._ollama_get("ollamaRunningModels", "The loaded models, memory and expiry (Ollama)"),
            "/api/show": self._ollama_post(
                "ollamaShowModel",
                "One model's details, template and capabilities (Ollama)",
                "ollama_show_request",
                {"model": model},
                "The model's details",
                False,
            ),
            "/api/chat": self._ollama_post(
                "ollamaChat",
                "Chat (Ollama)",
                "ollama_chat_request",
                {"model": model, "messages": message, "stream": False, "options": few},
                "A chat object, or (`stream` defaults to true) NDJSON chat objects ending with `done: true`",
                True,
            ),
            "/api/generate": self._ollama_post(
                "ollamaGenerate",
                "Generate a completion (Ollama)",
                "ollama_generate_request",
                {"model": model, "prompt": "Once upon a time", "stream": False, "options": few},
                "A generate object, or (`stream` defaults to true) NDJSON objects ending with `done: true`",
                True,
            ),
            "/api/embed": self._ollama_post(
                "ollamaEmbed",
                "Embed texts (Ollama); needs an embedding model",
                "ollama_embed_request",
                {"model": model, "input": ["Hello"]},
                "One vector per input",
                False,
            ),
            "/api/embeddings": self._ollama_post(
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
                "responses": self._ollama_errors([400, 401, 403, 404] if name in managed else [401, 403]),
            }
            if name in managed:
                operation["responses"]["200"] = {"description": "Done (for a pull: NDJSON progress lines)"}
            paths[f"/api/{name}"] = {method: operation}
        return paths

    def mcp_paths(self) -> dict[str, Any]:
        """``GET /v1/mcp/tools`` and ``POST /v1/mcp/execute`` (see
        :mod:`gateway.mcp.routes`)."""
        text, obj = {"type": "string"}, {"type": "object"}
        tool = {
            "type": "object",
            "required": ["server", "name", "description", "input_schema"],
            "properties": {
                "server": text,
                "name": text,
                "description": text,
                "input_schema": obj,
                "annotations": {"type": ["object", "null"]},
            },
        }
        server = {
            "type": "object",
            "required": ["name", "transport", "connected", "error"],
            "properties": {
                "name": text,
                "transport": {"enum": ["stdio", "streamable_http"]},
                "connected": {"type": "boolean"},
                "error": {"type": ["string", "null"]},
            },
        }
        listing = {
            "type": "object",
            "required": ["object", "data", "servers"],
            "properties": {
                "object": {"const": "list"},
                "data": {"type": "array", "items": tool},
                "servers": {"type": "array", "items": server},
            },
        }
        result = {
            "type": "object",
            "required": ["object", "server", "tool", "is_error", "content", "text"],
            "properties": {
                "object": {"const": "mcp.tool_result"},
                "server": text,
                "tool": text,
                "is_error": {"type": "boolean"},
                "content": {"type": "array", "items": obj},
                "text": text,
                "structured_content": {"type": ["object", "null"]},
            },
        }
        body = {
            "type": "object",
            "required": ["server", "tool"],
            "additionalProperties": False,
            "properties": {"server": text, "tool": text, "arguments": obj},
        }
        errors = {
            400: "Invalid body, unknown server or tool, or arguments that break the tool's input schema",
            401: _OPENAI_ERRORS[401],
            413: _OPENAI_ERRORS[413],
            415: _OPENAI_ERRORS[415],
            502: "The MCP server is down or its session broke",
            504: "The call ran past the server's `call_timeout`",
        }
        return {
            "/v1/mcp/tools": {
                "get": {
                    "operationId": "listMcpTools",
                    "summary": "The tools of the configured MCP servers",
                    "tags": ["MCP"],
                    "responses": {
                        **self._ok("The tools and each server's state", listing),
                        **self._error_responses({401: _OPENAI_ERRORS[401]}, False),
                    },
                }
            },
            "/v1/mcp/execute": {
                "post": {
                    "operationId": "executeMcpTool",
                    "summary": "Run one tool of a configured MCP server (audited)",
                    "tags": ["MCP"],
                    "requestBody": {
                        "required": True,
                        "content": {
                            JSON: {
                                "schema": body,
                                "example": {"server": "calc", "tool": "add", "arguments": {"a": 1, "b": 2}},
                            }
                        },
                    },
                    "responses": {
                        **self._ok("The tool's result (`is_error` when the tool reported a failure)", result),
                        **self._error_responses(errors, False),
                    },
                }
            },
        }

    def dashboard_paths(self) -> dict[str, Any]:
        """The status snapshot, the admin actions and the dashboard page
        (:mod:`gateway.dashboard.routes`)."""
        key = {401: _OPENAI_ERRORS[401]}
        model_body = {
            "required": True,
            "content": {JSON: {"schema": self.refs["model_action"], "example": {"model": self.model}}},
        }
        bad_body = {400: 'The body is not `{"model": NAME}`', 413: _OPENAI_ERRORS[413]}
        result = self.refs["admin_action"]

        def admin(operation_id: str, summary: str, body: Any, ok: str, errors: dict[int, str]) -> dict[str, Any]:
            operation = {
                "operationId": operation_id,
                "summary": summary,
                "tags": ["Operations"],
                "responses": {**self._ok(ok, result), **self._error_responses({**key, **errors}, False)},
            }
            if body is not None:
                operation["requestBody"] = body
            return {"post": operation}

        return {
            "/v1/status": {
                "get": {
                    "operationId": "status",
                    "summary": "Every model's state, memory, caches and requests; recent samples and requests",
                    "tags": ["Operations"],
                    "parameters": [
                        {
                            "name": "since",
                            "in": "query",
                            "required": False,
                            "description": "Only the samples after this Unix time (the `t` of the last one seen)",
                            "schema": {"type": "number"},
                        }
                    ],
                    "responses": {
                        **self._ok("The status snapshot", self.refs["status"]),
                        **self._error_responses(
                            {**key, 400: "`since` is not a number", 503: "The gateway is still starting"}, False
                        ),
                    },
                }
            },
            "/v1/admin/load": admin(
                "adminLoad",
                "Load a model; answers once it is ready",
                model_body,
                "The model is ready",
                {
                    **bad_body,
                    404: _OPENAI_ERRORS[404],
                    503: "The model cannot be loaded (failed, draining, over the memory budget, or not ready in "
                    "`worker_start_timeout`)",
                },
            ),
            "/v1/admin/unload": admin(
                "adminUnload",
                "Unload a model once its requests have finished",
                model_body,
                "The model is unloaded (or was not loaded)",
                {**bad_body, 404: _OPENAI_ERRORS[404]},
            ),
            "/v1/admin/reload": admin(
                "adminReload",
                "Re-read the config file and apply it (as SIGHUP and `mlxd reload` do)",
                {
                    "required": False,
                    "content": {JSON: {"schema": {"type": "object", "maxProperties": 0}, "example": {}}},
                },
                "The config was applied; one line per change",
                {
                    400: "A body other than `{}`",
                    409: "The config file is invalid; the running config stays",
                    413: _OPENAI_ERRORS[413],
                    503: "The gateway was not started by `mlxd serve` (no config file to reload)",
                },
            ),
            "/dashboard": {
                "get": {
                    "operationId": "dashboard",
                    "summary": "The live dashboard page (reads `GET /v1/status`)",
                    "tags": ["Operations"],
                    "security": [],
                    "responses": {
                        "200": {"description": "The page", "content": {"text/html": {"schema": {"type": "string"}}}}
                    },
                }
            },
        }

    def control_paths(self) -> dict[str, Any]:
        """The cache and request control routes (:mod:`gateway.control.routes`)."""
        key = {401: _OPENAI_ERRORS[401]}
        model = {
            "name": "model",
            "in": "query",
            "required": False,
            "description": "One model (a name or alias); every model the key may use when left out",
            "schema": {"type": "string"},
        }
        return {
            "/v1/cache/stats": {
                "get": {
                    "operationId": "cacheStats",
                    "summary": "Per model: the prefix cache's memory and disk tiers (entries, bytes, hit rates, "
                    "evictions) and its warm prompts",
                    "tags": ["Operations"],
                    "parameters": [model],
                    "responses": {
                        **self._ok("Every (or the one) model's cache", self.refs["cache_stats"]),
                        **self._error_responses({**key, 404: _OPENAI_ERRORS[404]}, False),
                    },
                }
            },
            "/v1/cache": {
                "delete": {
                    "operationId": "clearCache",
                    "summary": "Empty the prefix cache, memory and disk tiers, of one model or of every model",
                    "tags": ["Operations"],
                    "parameters": [model],
                    "responses": {
                        **self._ok("What each model's clear dropped", self.refs["cache_cleared"]),
                        **self._error_responses(
                            {**key, 404: _OPENAI_ERRORS[404], 503: "A worker did not clear its cache in time"}, False
                        ),
                    },
                }
            },
            "/v1/requests/{request_id}/cancel": {
                "post": {
                    "operationId": "cancelRequest",
                    "summary": "End a request in flight by its id (`chatcmpl-…`, `cmpl-…`, `resp_…`, `msg_…`): "
                    "its client gets one terminal abort",
                    "tags": ["Operations"],
                    "parameters": [
                        {
                            "name": "request_id",
                            "in": "path",
                            "required": True,
                            "description": "The id the request's answer carries",
                            "schema": {"type": "string"},
                        }
                    ],
                    "responses": {
                        **self._ok("The request was ended", self.refs["request_cancelled"]),
                        **self._error_responses(
                            {**key, 404: "No such request in flight for this key (`request_not_found`)"}, False
                        ),
                    },
                }
            },
        }

    def audio_paths(self) -> dict[str, Any]:
        """``/v1/audio/transcriptions`` and ``/v1/audio/translations``: a
        multipart form in, JSON, plain text or (transcriptions) an SSE stream
        out (:mod:`gateway.transcription`)."""
        number = {"type": "number"}
        segment = {
            "type": "object",
            "required": [
                "id",
                "seek",
                "start",
                "end",
                "text",
                "tokens",
                "temperature",
                "avg_logprob",
                "compression_ratio",
                "no_speech_prob",
            ],
            "properties": {
                "id": {"type": "integer"},
                "seek": {"type": "integer"},
                "start": number,
                "end": number,
                "text": {"type": "string"},
                "tokens": {"type": "array", "items": {"type": "integer"}},
                "temperature": number,
                "avg_logprob": number,
                "compression_ratio": number,
                "no_speech_prob": number,
            },
        }
        word = {
            "type": "object",
            "required": ["word", "start", "end"],
            "properties": {"word": {"type": "string"}, "start": number, "end": number},
        }
        usage = {
            "type": "object",
            "required": ["type", "seconds"],
            "properties": {"type": {"const": "duration"}, "seconds": number},
        }
        answer = {
            "type": "object",
            "required": ["text"],
            "properties": {
                "text": {"type": "string"},
                "task": {"enum": ["transcribe", "translate"]},
                "language": {"type": "string"},
                "duration": number,
                "segments": {"type": "array", "items": segment},
                "words": {"type": "array", "items": word},
                "usage": usage,
            },
        }
        text_field = {"type": "string"}

        def form(task: str) -> dict[str, Any]:
            properties: dict[str, Any] = {
                "file": {
                    "type": "string",
                    "contentMediaType": "application/octet-stream",
                    "description": "The audio file: WAV, FLAC, MP3, OGG Vorbis or OGG Opus",
                },
                "model": {"type": "string", "minLength": 1},
                "prompt": text_field,
                "response_format": {"enum": ["json", "text", "srt", "verbose_json", "vtt"], "default": "json"},
                "temperature": {"type": "number", "minimum": 0, "maximum": 1, "default": 0},
            }
            if task == "transcribe":
                properties["language"] = text_field
                properties["timestamp_granularities[]"] = {"type": "array", "items": {"enum": ["word", "segment"]}}
                properties["stream"] = {"type": "boolean", "default": False}
            return {
                "required": True,
                "content": {
                    "multipart/form-data": {
                        "schema": {"type": "object", "required": ["file", "model"], "properties": properties}
                    }
                },
            }

        def operation(task: str, operation_id: str, summary: str) -> dict[str, Any]:
            content: dict[str, Any] = {
                JSON: {"schema": answer},
                "text/plain": {"schema": {"type": "string"}},
                "application/x-subrip": {"schema": {"type": "string"}},
                "text/vtt": {"schema": {"type": "string"}},
            }
            if task == "transcribe":
                event = {
                    "type": "object",
                    "required": ["type"],
                    "properties": {
                        "type": {"enum": ["transcript.text.delta", "transcript.text.done"]},
                        "delta": {"type": "string"},
                        "text": {"type": "string"},
                    },
                }
                payload = {"anyOf": [event, self.refs["openai_error"]]}
                data = {"type": "string", "if": {"const": DONE_DATA}, "else": _json_text(payload)}
                content[SSE_MEDIA_TYPE] = {"schema": self._sse_event(None, data)}
            return {
                "operationId": operation_id,
                "summary": summary,
                "tags": ["OpenAI"],
                "requestBody": form(task),
                "responses": {
                    "200": {
                        "description": "The transcript in `response_format` (or its stream events)",
                        "content": content,
                    },
                    **self._error_responses(_OPENAI_ERRORS, False),
                },
            }

        return {
            "/v1/audio/transcriptions": {
                "post": operation(
                    "transcribe", "createTranscription", "Transcribe audio (OpenAI); needs a transcription model"
                )
            },
            "/v1/audio/translations": {
                "post": operation(
                    "translate",
                    "createTranslation",
                    "Translate audio into English text (OpenAI); needs a multilingual transcription model",
                )
            },
        }

    def paths(self, include_openapi_route: bool) -> dict[str, Any]:
        """Every path item."""
        model = self.model
        message = [{"role": "user", "content": "Hello"}]
        openai_errors = {s: _OPENAI_ERRORS[s] for s in (401, 404)}
        request_id = {
            "request-id": self._header("The id of this answer", {"type": "string"}, True),
        }
        optional_key = [{}, {BEARER_SCHEME: []}, {API_KEY_SCHEME: []}]
        paths: dict[str, Any] = {
            "/v1/chat/completions": {
                "post": self.generation(
                    operation_id="createChatCompletion",
                    summary="Chat completion (OpenAI)",
                    tag="OpenAI",
                    body="chat_request",
                    example={"model": model, "messages": message, "max_tokens": 8},
                    ok=self._ok(
                        "A `chat.completion`, or with `stream: true` a stream of `chat.completion.chunk` "
                        "frames ending with `data: [DONE]`",
                        self.refs["chat_completion"],
                        self._openai_stream(self.chat_chunk()),
                    ),
                )
            },
            "/v1/completions": {
                "post": self.generation(
                    operation_id="createCompletion",
                    summary="Text completion (OpenAI, legacy)",
                    tag="OpenAI",
                    body="completion_request",
                    example={"model": model, "prompt": "Once upon a time", "max_tokens": 8},
                    ok=self._ok(
                        "A `text_completion`, or with `stream: true` a stream of them ending with `data: [DONE]`",
                        self.refs["text_completion"],
                        self._openai_stream(self.completion_chunk()),
                    ),
                )
            },
            "/v1/embeddings": {
                "post": self.generation(
                    operation_id="createEmbedding",
                    summary="Embed texts or token ids (OpenAI); needs an embedding model",
                    tag="OpenAI",
                    body="embedding_request",
                    example={"model": model, "input": ["Hello", "world"]},
                    ok=self._ok(
                        "A `list` of `embedding` objects, one per input, in order", self.refs["embedding_list"]
                    ),
                )
            },
            **{
                path: {
                    "post": self.generation(
                        operation_id="rerank" + suffix,
                        summary="Rank documents against a query (Cohere/Jina/vLLM shape); needs a rerank model",
                        tag="Rerank",
                        body="rerank_request",
                        example={
                            "model": model,
                            "query": "what is MLX?",
                            "documents": ["MLX is an array framework", "Bananas"],
                        },
                        ok=self._ok(
                            "The documents' `results` (`index`, `relevance_score`, `document`), best first, and `usage`",
                            self.refs["rerank_response"],
                        ),
                    )
                }
                for path, suffix in (("/v1/rerank", ""), ("/rerank", "Unversioned"), ("/v2/rerank", "V2"))
            },
            **self.speech_paths(),
            "/v1/responses": {
                "post": self.generation(
                    operation_id="createResponse",
                    summary="Create a response (OpenAI Responses API, stateless)",
                    tag="OpenAI",
                    body="responses_request",
                    example={"model": model, "input": "Hello", "max_output_tokens": 8},
                    ok=self._ok(
                        "A `response` object, or with `stream: true` its stream events",
                        self.refs["response"],
                        self._sse_event(self.responses_events(), {}),
                    ),
                )
            },
            "/v1/messages": {
                "post": self.generation(
                    operation_id="createMessage",
                    summary="Create a message (Anthropic Messages API)",
                    tag="Anthropic",
                    body="messages_request",
                    example={"model": model, "messages": message, "max_tokens": 8},
                    ok=self._ok(
                        "A `message`, or with `stream: true` its stream events",
                        self.refs["message"],
                        self._sse_event(self.anthropic_events(), {}),
                        request_id,
                    ),
                    anthropic=True,
                )
            },
            "/v1/messages/count_tokens": {
                "post": self.generation(
                    operation_id="countMessageTokens",
                    summary="Count the prompt tokens of a message request (Anthropic)",
                    tag="Anthropic",
                    body="count_tokens_request",
                    example={"model": model, "messages": message},
                    ok=self._ok("The prompt's token count", self.refs["token_count"], None, request_id),
                    anthropic=True,
                )
            },
            "/v1/models": {
                "get": {
                    "operationId": "listModels",
                    "summary": "List the configured models (canonical names)",
                    "tags": ["OpenAI"],
                    "responses": {
                        **self._ok("The model list", self.refs["model_list"]),
                        **self._error_responses({401: _OPENAI_ERRORS[401]}, False),
                    },
                }
            },
            "/v1/models/{model}": {
                "get": {
                    "operationId": "retrieveModel",
                    "summary": "One model, by its name or an alias",
                    "tags": ["OpenAI"],
                    "parameters": [
                        {
                            "name": "model",
                            "in": "path",
                            "required": True,
                            "description": "A model name or alias (may contain `/`)",
                            "schema": {"type": "string", "minLength": 1},
                            "example": model,
                        }
                    ],
                    "responses": {
                        **self._ok("The model (an alias answers with its canonical model)", self.refs["model"]),
                        **self._error_responses(openai_errors, False),
                    },
                }
            },
            **self.mcp_paths(),
            **self.dashboard_paths(),
            **self.control_paths(),
            "/health": {
                "get": {
                    "operationId": "health",
                    "summary": "Liveness, with each model's worker status",
                    "tags": ["Operations"],
                    "security": [],
                    "responses": self._ok("The gateway runs", self.refs["health"]),
                }
            },
            "/ready": {
                "get": {
                    "operationId": "ready",
                    "summary": "Readiness: every preloaded model is ready",
                    "tags": ["Operations"],
                    "security": optional_key,
                    "responses": {
                        **self._ok("Every preloaded model is ready", self.refs["readiness"]),
                        "503": {
                            "description": "Some preloaded model is not ready, or the server is draining",
                            "content": {JSON: {"schema": self.refs["readiness"]}},
                        },
                        **self._error_responses({401: _OPENAI_ERRORS[401] + " (with `metrics_require_key`)"}, False),
                    },
                }
            },
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "summary": "Prometheus metrics",
                    "tags": ["Operations"],
                    "security": optional_key,
                    "responses": {
                        "200": {
                            "description": "Prometheus text exposition",
                            "content": {METRICS_MEDIA_TYPE: {"schema": {"type": "string"}}},
                        },
                        **self._error_responses({401: _OPENAI_ERRORS[401] + " (with `metrics_require_key`)"}, False),
                    },
                }
            },
        }
        paths.update(self.audio_paths())
        paths.update(self.ollama_paths())
        if include_openapi_route:
            paths["/openapi.json"] = {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document",
                    "tags": ["Operations"],
                    "security": [],
                    "responses": self._ok("The OpenAPI document", {"type": "object"}),
                }
            }
        return paths


def _json_text(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema of a string holding JSON text that follows ``schema``."""
    return {"type": "string", "contentMediaType": JSON, "contentSchema": schema}


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
    views = _SchemaViews(_TYPES.values())
    keys = list(_TYPES)
    schemas, components = msgspec.json.schema_components(
        [views.view(_TYPES[key], encoded=key not in _DECODED) for key in keys],
        ref_template=SCHEMA_REF_PREFIX + "{name}",
    )
    refs = dict(zip(keys, schemas))
    builder = _Builder(refs, model_names[0] if model_names else EXAMPLE_MODEL)
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
        "paths": builder.paths(include_openapi_route),
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
