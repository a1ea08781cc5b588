"""Anthropic Messages responses and stream events, as bytes.

Errors are rendered by :mod:`gateway.frontend.error_shapes` (Anthropic's 529
``overloaded_error`` for mlxd's 503s included); a stream's error event is
:meth:`MessageEventStream.error`.

Content: a turn's output becomes content blocks in the order the model
produces them: reasoning becomes a ``thinking`` block (``signature`` is
always empty: mlxd does not sign reasoning), text a ``text`` block, and each
tool call a ``tool_use`` block whose ``input`` is the call's arguments
parsed as a JSON object. The answer is built by
:class:`gateway.anthropic.builder.MessageBuilder`; this module holds the
shapes, errors, stop reasons and usage it uses.

Usage follows Anthropic's convention: ``input_tokens`` counts the prompt
tokens that were computed, ``cache_read_input_tokens`` those reused from the
prefix cache (together the whole prompt), ``cache_creation_input_tokens`` is
always 0 (mlxd's cache fills as a side effect, never billed), and so is
``cache_creation``; ``server_tool_use`` counts no requests (no server tool
ever runs) and ``service_tier`` is ``standard``.

Every field the current schemas define is present: ``stop_details``,
``container`` and ``diagnostics`` are null, text blocks carry ``citations:
null``, tool-use ids start with ``toolu_``, and with context-management
edits the message (and ``message_delta``) carries ``context_management``.
"""

from __future__ import annotations

import logging
from typing import Any, Literal, Union

import msgspec

from gateway.core.errors import APIError
from gateway.frontend.answer_driver import TokenTally

log = logging.getLogger("mlxd.gateway.anthropic")

_encoder = msgspec.json.Encoder()


def encode(obj: object) -> bytes:
    """Return ``obj`` as compact JSON bytes (msgspec)."""
    return _encoder.encode(obj)


# --- stop reasons and usage --------------------------------------------------------


def stop_reason(finish_reason: str | None, stop_sequence: str | None) -> tuple[str, str | None]:
    """``(stop_reason, stop_sequence)`` for a successful finish: tool_calls
    -> ``tool_use``, length -> ``max_tokens``, stop with a matched stop
    string -> ``stop_sequence`` (and that string), stop -> ``end_turn``."""
    if finish_reason == "tool_calls":
        return "tool_use", None
    if finish_reason == "length":
        return "max_tokens", None
    if stop_sequence is not None:
        return "stop_sequence", stop_sequence
    return "end_turn", None


class CacheCreation(msgspec.Struct, kw_only=True):
    """``usage.cache_creation``: tokens written to the cache per lifetime
    (always 0: mlxd's cache fills as a side effect)."""

    ephemeral_5m_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0


class ServerToolUsage(msgspec.Struct, kw_only=True):
    """``usage.server_tool_use``: server tool requests (always 0)."""

    web_search_requests: int = 0
    web_fetch_requests: int = 0


class Usage(msgspec.Struct, kw_only=True):
    """A message's ``usage`` (see the module docstring for the meaning).
    The beta schema's ``fallback_credit``, ``iterations`` and
    ``output_tokens_details`` are always null here (no fallback credits, one
    sampling iteration, no separate count of thinking tokens) and ``speed``
    is ``standard``."""

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation: CacheCreation = msgspec.field(default_factory=CacheCreation)
    server_tool_use: ServerToolUsage = msgspec.field(default_factory=ServerToolUsage)
    service_tier: str = "standard"
    inference_geo: str | None = None
    fallback_credit: None = None
    iterations: None = None
    output_tokens_details: None = None
    speed: str = "standard"


class DeltaUsage(msgspec.Struct, kw_only=True):
    """The cumulative ``usage`` of a ``message_delta`` event."""

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    server_tool_use: ServerToolUsage = msgspec.field(default_factory=ServerToolUsage)
    fallback_credit: None = None
    iterations: None = None
    output_tokens_details: None = None


def usage_of(tally: TokenTally) -> Usage:
    """The ``usage`` of a single-choice request's counts: the computed
    prompt tokens as ``input_tokens``, the reused ones as
    ``cache_read_input_tokens``."""
    cached = min(tally.cached, tally.prompt)
    return Usage(input_tokens=tally.prompt - cached, output_tokens=tally.completion, cache_read_input_tokens=cached)


def delta_usage_of(tally: TokenTally) -> DeltaUsage:
    """The ``message_delta`` usage of a single-choice request's counts."""
    usage = usage_of(tally)
    return DeltaUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_input_tokens=usage.cache_read_input_tokens,
    )


# --- tool calls ----------------------------------------------------------------------


def tool_input(arguments: str) -> dict[str, Any]:
    """Parse a complete tool call's ``arguments`` (empty means ``{}``).

    Raises:
        APIError: 500 when they are not a JSON object (the worker promised
        one).
    """
    if not arguments.strip():
        return {}
    try:
        value = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        value = None
    if not isinstance(value, dict):
        log.error("tool call arguments are not a JSON object (%d chars)", len(arguments))
        raise APIError(500, "The model produced tool call arguments that are not a JSON object")
    return value


# --- the non-streamed message ----------------------------------------------------------


class TextContent(msgspec.Struct, tag_field="type", tag="text", kw_only=True):
    """A ``text`` content block (``citations`` always null)."""

    text: str
    citations: None = None


class ThinkingContent(msgspec.Struct, tag_field="type", tag="thinking", kw_only=True):
    """A ``thinking`` content block (``signature`` always empty)."""

    thinking: str
    signature: str = ""


class ToolUseContent(msgspec.Struct, tag_field="type", tag="tool_use", kw_only=True):
    """A ``tool_use`` content block."""

    id: str
    name: str
    input: dict[str, Any]


ContentBlock = Union[ThinkingContent, TextContent, ToolUseContent]
"""Any block of a response's ``content``."""


class Message(msgspec.Struct, kw_only=True):
    """A ``message`` object (``stop_reason`` null only in ``message_start``)."""

    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ContentBlock]
    stop_reason: str | None = None
    stop_sequence: str | None = None
    stop_details: None = None
    container: None = None
    diagnostics: None = None
    usage: Usage


class ManagedMessage(Message, kw_only=True):
    """A ``message`` answering a request with context management: also its
    ``context_management`` (``{"applied_edits": [...]}``)."""

    context_management: dict[str, Any]


def new_message(applied: list[dict[str, Any]] | None, **fields: Any) -> Message:
    """A :class:`Message` of ``fields``, or a :class:`ManagedMessage` with the
    ``applied`` edits when the request had context management (``applied``
    not None)."""
    if applied is None:
        return Message(**fields)
    return ManagedMessage(**fields, context_management={"applied_edits": applied})


def count_tokens_body(input_tokens: int, original_input_tokens: int | None = None) -> bytes:
    """The JSON of a ``count_tokens`` answer; with ``original_input_tokens``
    (the count before context-management edits) also its
    ``context_management`` object."""
    if original_input_tokens is None:
        return encode({"input_tokens": input_tokens})
    context = {"original_input_tokens": original_input_tokens}
    return encode({"input_tokens": input_tokens, "context_management": context})
