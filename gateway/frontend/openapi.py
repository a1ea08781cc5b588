"""The pieces every part of the OpenAPI document (``GET /openapi.json``) is
built with.

Each protocol package describes its own routes in its ``openapi`` module
(:mod:`gateway.openai.openapi`, :mod:`gateway.anthropic.openapi`, ...);
:mod:`gateway.openapi_document` assembles the parts into one document.
Here is what the parts share: the media types and security scheme names,
the error shapes and statuses of the OpenAI and Anthropic protocols (the
routes build those bodies as plain dicts; the Structs below describe them),
and :class:`PathBuilder`, which turns a route's body, answers and error
statuses into OpenAPI objects that point at the generated component schemas.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from gateway.frontend.sse import MEDIA_TYPE as SSE_MEDIA_TYPE

JSON = "application/json"
"""The media type of every JSON body."""

BEARER_SCHEME = "bearerAuth"
"""Security scheme: ``Authorization: Bearer <key>``."""

API_KEY_SCHEME = "apiKeyHeader"
"""Security scheme: ``x-api-key: <key>`` (what the Anthropic SDKs send)."""

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


ERRORS: dict[str, Any] = {
    "openai_error": OpenAIError,
    "anthropic_error": AnthropicError,
}
"""The error shapes :meth:`PathBuilder.error_responses` refers to, by their
key in the document's types (the server encodes them)."""

OPENAI_ERRORS = {
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

ANTHROPIC_ERRORS = {
    400: OPENAI_ERRORS[400],
    401: OPENAI_ERRORS[401],
    404: OPENAI_ERRORS[404],
    413: OPENAI_ERRORS[413],
    415: OPENAI_ERRORS[415],
    429: OPENAI_ERRORS[429],
    500: OPENAI_ERRORS[500],
    504: OPENAI_ERRORS[504],
    529: "Overloaded: the model is not ready, its queue is full or the request was aborted; retry after `Retry-After`",
}
"""Anthropic-protocol error statuses of the ``/v1/messages`` routes."""


def json_text(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema of a string holding JSON text that follows ``schema``."""
    return {"type": "string", "contentMediaType": JSON, "contentSchema": schema}


class PathBuilder:
    """Builds the OpenAPI objects of routes from the generated schemas
    (``refs``: a type's key -> its schema, a ``$ref`` for Structs);
    ``model`` is the model named in request examples."""

    def __init__(self, refs: dict[str, dict[str, Any]], example_model: str) -> None:
        self.refs = refs
        self.model = example_model

    # -- responses --

    @staticmethod
    def header(description: str, schema: dict[str, Any], required: bool = False) -> dict[str, Any]:
        """A response header object."""
        return {"description": description, "required": required, "schema": schema}

    def error_responses(self, statuses: dict[int, str], anthropic: bool) -> dict[str, Any]:
        """Error response objects for ``statuses`` in the route's protocol."""
        schema = self.refs["anthropic_error" if anthropic else "openai_error"]
        out: dict[str, Any] = {}
        for status, description in statuses.items():
            headers: dict[str, Any] = {}
            if anthropic:
                headers["request-id"] = self.header(
                    "The id of this answer (equal to the body's `request_id`)", {"type": "string"}, True
                )
            if status == 401:
                headers["WWW-Authenticate"] = self.header("The scheme to authenticate with", {"type": "string"})
            if status in (429, 503, 529):
                headers["Retry-After"] = self.header(
                    "Seconds to wait before retrying", {"type": "integer", "minimum": 0}, anthropic or status == 429
                )
            response: dict[str, Any] = {"description": description, "content": {JSON: {"schema": schema}}}
            if headers:
                response["headers"] = headers
            out[str(status)] = response
        return out

    @staticmethod
    def sse_event(event_names: dict[str, dict[str, Any]] | None, data: dict[str, Any]) -> dict[str, Any]:
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
                "then": {"properties": {"data": json_text(schema)}},
            }
            for name, schema in event_names.items()
        ]
        return event

    def openai_stream(self, chunk: dict[str, Any]) -> dict[str, Any]:
        """An OpenAI-style stream event: a ``chunk``, an error frame, or the
        final ``[DONE]``."""
        payload = {"anyOf": [chunk, self.refs["openai_error"]]}
        data = {"type": "string", "if": {"const": DONE_DATA}, "else": json_text(payload)}
        return self.sse_event(None, data)

    def ok(
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

    # -- operations --

    def body(self, key: str, example: dict[str, Any], streams: bool) -> dict[str, Any]:
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
        errors = ANTHROPIC_ERRORS if anthropic else OPENAI_ERRORS
        return {
            "operationId": operation_id,
            "summary": summary,
            "tags": [tag],
            "requestBody": self.body(body, example, SSE_MEDIA_TYPE in ok["200"]["content"]),
            "responses": {**ok, **self.error_responses(errors, anthropic)},
        }
