"""The Anthropic Messages front-end's part of the OpenAPI document: ``POST
/v1/messages`` (and its stream events) and ``POST /v1/messages/count_tokens``,
and the types they are generated from.

Assembled with the other parts by :mod:`gateway.openapi_document`.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from gateway.anthropic import format as anthropic_format
from gateway.anthropic.schema import CountTokensRequest, MessagesRequest
from gateway.frontend.openapi import AnthropicErrorDetail, PathBuilder


class AnthropicStreamError(msgspec.Struct, kw_only=True):
    """The data of an Anthropic ``event: error`` frame (mid-stream error)."""

    type: Literal["error"]
    error: AnthropicErrorDetail


class TokenCount(msgspec.Struct, kw_only=True):
    """The ``POST /v1/messages/count_tokens`` answer: how many tokens the
    request's prompt (system, messages, tools) renders to."""

    input_tokens: int


BODIES: dict[str, Any] = {
    "messages_request": MessagesRequest,
    "count_tokens_request": CountTokensRequest,
}
"""The request bodies the routes decode, by their key in the document's types."""

ANSWERS: dict[str, Any] = {
    "message": anthropic_format.Message,
    "anthropic_usage": anthropic_format.Usage,
    "anthropic_delta_usage": anthropic_format.DeltaUsage,
    "content_block": anthropic_format.ContentBlock,
    "token_count": TokenCount,
}
"""The answers the routes encode (and pieces of the stream events), by key."""

ERRORS: dict[str, Any] = {"anthropic_stream_error": AnthropicStreamError}
"""The mid-stream error's data, by key."""

DECODED = frozenset(BODIES)
"""The keys of this part's types that the server decodes."""


def stream_events(b: PathBuilder) -> dict[str, dict[str, Any]]:
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
        "message_start": event("message_start", {"message": b.refs["message"]}),
        "ping": event("ping", {}),
        "content_block_start": event("content_block_start", {"index": index, "content_block": b.refs["content_block"]}),
        "content_block_delta": event("content_block_delta", {"index": index, "delta": delta}),
        "content_block_stop": event("content_block_stop", {"index": index}),
        "message_delta": event("message_delta", {"delta": stop, "usage": b.refs["anthropic_delta_usage"]}),
        "message_stop": event("message_stop", {}),
        "error": b.refs["anthropic_stream_error"],
    }


def paths(b: PathBuilder) -> dict[str, Any]:
    """``POST /v1/messages`` and ``POST /v1/messages/count_tokens``."""
    message = [{"role": "user", "content": "Hello"}]
    request_id = {
        "request-id": b.header("The id of this answer", {"type": "string"}, True),
    }
    return {
        "/v1/messages": {
            "post": b.generation(
                operation_id="createMessage",
                summary="Create a message (Anthropic Messages API)",
                tag="Anthropic",
                body="messages_request",
                example={"model": b.model, "messages": message, "max_tokens": 8},
                ok=b.ok(
                    "A `message`, or with `stream: true` its stream events",
                    b.refs["message"],
                    b.sse_event(stream_events(b), {}),
                    request_id,
                ),
                anthropic=True,
            )
        },
        "/v1/messages/count_tokens": {
            "post": b.generation(
                operation_id="countMessageTokens",
                summary="Count the prompt tokens of a message request (Anthropic)",
                tag="Anthropic",
                body="count_tokens_request",
                example={"model": b.model, "messages": message},
                ok=b.ok("The prompt's token count", b.refs["token_count"], None, request_id),
                anthropic=True,
            )
        },
    }
