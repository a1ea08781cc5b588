"""The Responses front-end's part of the OpenAPI document: ``POST
/v1/responses``, its stream events, and the types they are generated from.

Assembled with the other parts by :mod:`gateway.openapi_document`.
"""

from __future__ import annotations

from typing import Any

from gateway.frontend.openapi import PathBuilder
from gateway.responses import format as responses_format
from gateway.responses.schema import ResponsesRequest

BODIES: dict[str, Any] = {"responses_request": ResponsesRequest}
"""The request body the route decodes, by its key in the document's types."""

ANSWERS: dict[str, Any] = {"response": responses_format.ResponseBody}
"""The answer the route encodes, by key."""

EVENTS: dict[str, Any] = {
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
"""The data types of the stream's events, by key (see :data:`STREAM_EVENTS`)."""

DECODED = frozenset(BODIES)
"""The keys of this part's types that the server decodes."""

STREAM_EVENTS: dict[str, str] = {
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
"""Responses stream: event name -> the key of its data's type in :data:`EVENTS`
(the data's ``type`` equals the event name)."""


def stream_events(b: PathBuilder) -> dict[str, dict[str, Any]]:
    """Responses stream: event name -> the schema of its data."""
    return {
        name: {"allOf": [b.refs[key], {"properties": {"type": {"const": name}}}]} for name, key in STREAM_EVENTS.items()
    }


def paths(b: PathBuilder) -> dict[str, Any]:
    """``POST /v1/responses``."""
    return {
        "/v1/responses": {
            "post": b.generation(
                operation_id="createResponse",
                summary="Create a response (OpenAI Responses API, stateless)",
                tag="OpenAI",
                body="responses_request",
                example={"model": b.model, "input": "Hello", "max_output_tokens": 8},
                ok=b.ok(
                    "A `response` object, or with `stream: true` its stream events",
                    b.refs["response"],
                    b.sse_event(stream_events(b), {}),
                ),
            )
        },
    }
