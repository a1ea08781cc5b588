"""The OpenAI chat and completions front-end's part of the OpenAPI document:
``POST /v1/chat/completions``, ``POST /v1/completions``, ``GET /v1/models``
and ``GET /v1/models/{model}``, and the types they are generated from.

Assembled with the other parts by :mod:`gateway.openapi_document`.
"""

from __future__ import annotations

from typing import Any

from gateway.frontend.openapi import OPENAI_ERRORS, PathBuilder
from gateway.openai import format as openai_format
from gateway.openai.schema import ChatCompletionRequest, CompletionRequest

BODIES: dict[str, Any] = {
    "chat_request": ChatCompletionRequest,
    "completion_request": CompletionRequest,
}
"""The request bodies the routes decode, by their key in the document's types."""

ANSWERS: dict[str, Any] = {
    "chat_completion": openai_format.ChatCompletion,
    "text_completion": openai_format.TextCompletion,
    "completion_choice": openai_format.CompletionChoice,
    "chat_logprobs": openai_format.ChatLogprobs,
    "openai_usage": openai_format.Usage,
    "model_list": openai_format.ModelList,
    "model": openai_format.ModelCard,
}
"""The answers the routes encode (and pieces of the stream chunks), by key."""

DECODED = frozenset(BODIES)
"""The keys of this part's types that the server decodes."""


# -- stream chunk schemas (built as bytes by the format modules, so no Structs) --


def _chunk(b: PathBuilder, obj: str, choice: dict[str, Any]) -> dict[str, Any]:
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
            "usage": {"anyOf": [b.refs["openai_usage"], {"type": "null"}]},
        },
    }


def chat_chunk(b: PathBuilder) -> dict[str, Any]:
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
            "logprobs": {"anyOf": [b.refs["chat_logprobs"], {"type": "null"}]},
            "finish_reason": {"enum": ["stop", "length", "tool_calls", None]},
        },
    }
    return _chunk(b, "chat.completion.chunk", choice)


def completion_chunk(b: PathBuilder) -> dict[str, Any]:
    """A streamed ``text_completion`` chunk."""
    return _chunk(b, "text_completion", b.refs["completion_choice"])


# -- path items --


def generation_paths(b: PathBuilder) -> dict[str, Any]:
    """``POST /v1/chat/completions`` and ``POST /v1/completions``."""
    model = b.model
    message = [{"role": "user", "content": "Hello"}]
    return {
        "/v1/chat/completions": {
            "post": b.generation(
                operation_id="createChatCompletion",
                summary="Chat completion (OpenAI)",
                tag="OpenAI",
                body="chat_request",
                example={"model": model, "messages": message, "max_tokens": 8},
                ok=b.ok(
                    "A `chat.completion`, or with `stream: true` a stream of `chat.completion.chunk` "
                    "frames ending with `data: [DONE]`",
                    b.refs["chat_completion"],
                    b.openai_stream(chat_chunk(b)),
                ),
            )
        },
        "/v1/completions": {
            "post": b.generation(
                operation_id="createCompletion",
                summary="Text completion (OpenAI, legacy)",
                tag="OpenAI",
                body="completion_request",
                example={"model": model, "prompt": "Once upon a time", "max_tokens": 8},
                ok=b.ok(
                    "A `text_completion`, or with `stream: true` a stream of them ending with `data: [DONE]`",
                    b.refs["text_completion"],
                    b.openai_stream(completion_chunk(b)),
                ),
            )
        },
    }


def model_paths(b: PathBuilder) -> dict[str, Any]:
    """``GET /v1/models`` and ``GET /v1/models/{model}``."""
    return {
        "/v1/models": {
            "get": {
                "operationId": "listModels",
                "summary": "List the configured models (canonical names)",
                "tags": ["OpenAI"],
                "responses": {
                    **b.ok("The model list", b.refs["model_list"]),
                    **b.error_responses({401: OPENAI_ERRORS[401]}, False),
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
                        "example": b.model,
                    }
                ],
                "responses": {
                    **b.ok("The model (an alias answers with its canonical model)", b.refs["model"]),
                    **b.error_responses({s: OPENAI_ERRORS[s] for s in (401, 404)}, False),
                },
            }
        },
    }
