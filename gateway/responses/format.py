"""OpenAI Responses API objects and stream events (``POST /v1/responses``):
their shapes. Declarative (msgspec Structs), hence its length.

A response's ``output`` is a list of items, in the order the model produced
them: a ``reasoning`` item (its text as one ``reasoning_text`` content part;
``summary`` is always empty), a ``message`` item (one ``output_text`` part,
``annotations`` always empty, ``logprobs`` filled only when asked for) and
one ``function_call`` item per tool call (``call_id`` is the worker's
tool-call id). The events that build them, and the order they come in, are
described in :mod:`gateway.responses.builder`, which builds both.

Every response object echoes the request's settings
(:class:`ResponseSettings`, built by :mod:`gateway.responses.translate`) with
null/defaults where unset. Nothing is stored: ``store`` is always false.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Union

import msgspec

from gateway.frontend import sse
from gateway.openai.format import Usage
from gateway.responses.tools import ToolRef

ItemStatus = Literal["in_progress", "completed", "incomplete"]
"""Status of one output item."""

ResponseStatus = Literal["in_progress", "completed", "incomplete", "failed"]
"""Status of a response as mlxd reports it."""

_encoder = msgspec.json.Encoder()


# --- echoed request settings ----------------------------------------------------------


class TextFormatEcho(msgspec.Struct, kw_only=True, omit_defaults=True):
    """``text.format``: ``{"type": "text"}``, ``{"type": "json_object"}`` or
    ``{"type": "json_schema", "name", "schema", "description"?, "strict"?}``
    (unset fields are left out)."""

    type: str
    name: str | None = None
    schema: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None


class TextEcho(msgspec.Struct, kw_only=True):
    """``text``: the output format and the requested ``verbosity``
    (``medium`` when unset; it has no effect)."""

    format: TextFormatEcho
    verbosity: str = "medium"


class ReasoningEcho(msgspec.Struct, kw_only=True):
    """``reasoning``: the requested ``effort`` and ``summary`` (null when
    unset)."""

    effort: str | None = None
    summary: str | None = None


class ResponseSettings(msgspec.Struct, kw_only=True):
    """The request settings every response object echoes.

    Defaults are what mlxd applies when the request left a field unset
    (``temperature`` and ``top_p`` 1 for a model without sampling defaults,
    see :func:`gateway.responses.translate.response_settings`; no penalties,
    ``tool_choice`` ``auto`` with tools else ``none``, parallel tool calls
    allowed, plain text, no truncation). ``tools`` and an object
    ``tool_choice`` are echoed as sent (dropped tools left out);
    ``service_tier`` is always ``default``, the one way mlxd serves a
    request.
    """

    instructions: str | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    metadata: dict[str, str] = {}
    parallel_tool_calls: bool = True
    previous_response_id: None = None
    reasoning: ReasoningEcho = msgspec.field(default_factory=ReasoningEcho)
    service_tier: str = "default"
    store: bool = False
    background: bool = False
    temperature: float = 1.0
    text: TextEcho = msgspec.field(default_factory=lambda: TextEcho(format=TextFormatEcho(type="text")))
    tool_choice: Union[str, dict[str, Any]] = "none"
    tools: list[Any] = []
    top_logprobs: int = 0
    top_p: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    truncation: str = "disabled"
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    conversation: None = None
    prompt: None = None


@dataclass(frozen=True)
class OutputOptions:
    """How a response renders its output items.

    ``tools`` maps model-facing tool names to what they stand for
    (:class:`~gateway.responses.tools.ToolRef`): a call of a ``custom`` tool
    becomes a ``custom_tool_call`` item, a call of a namespaced tool names
    its ``namespace``. ``summary``: reasoning text goes into the reasoning
    item's ``summary`` (one ``summary_text`` part, streamed as
    ``response.reasoning_summary_*`` events) instead of its ``content``.
    ``encrypted_reasoning``: finished reasoning items carry
    ``encrypted_content`` (:func:`gateway.responses.encrypted_reasoning.seal` of
    their text). ``logprobs``: message text carries the log-probabilities
    of its tokens (on each ``output_text.delta`` and the ``output_text``
    part); those of reasoning tokens are left out.
    """

    tools: Mapping[str, ToolRef] = field(default_factory=dict)
    summary: bool = False
    encrypted_reasoning: bool = False
    logprobs: bool = False


# --- output items ------------------------------------------------------------------------


class OutputText(msgspec.Struct, kw_only=True):
    """The ``output_text`` content part of a message item."""

    type: str = "output_text"
    text: str
    annotations: list[Any] = []
    logprobs: list[Any] = []


class ReasoningText(msgspec.Struct, kw_only=True):
    """The ``reasoning_text`` content part of a reasoning item."""

    type: str = "reasoning_text"
    text: str


class SummaryText(msgspec.Struct, kw_only=True):
    """The ``summary_text`` part of a reasoning item's summary."""

    type: str = "summary_text"
    text: str


class MessageItem(msgspec.Struct, kw_only=True):
    """An assistant ``message`` output item."""

    type: str = "message"
    id: str
    status: ItemStatus
    role: str = "assistant"
    content: list[OutputText]


class ReasoningItem(msgspec.Struct, kw_only=True):
    """A ``reasoning`` output item: its text as ``content`` or, when a
    summary was asked for, as ``summary``; ``encrypted_content`` when
    asked for (see :class:`OutputOptions`)."""

    type: str = "reasoning"
    id: str
    summary: list[SummaryText] = []
    content: list[ReasoningText]
    encrypted_content: str | None = None
    status: ItemStatus


class FunctionCallItem(msgspec.Struct, kw_only=True):
    """A ``function_call`` output item; ``arguments`` is JSON text;
    ``namespace`` names the tool's namespace (null: top level)."""

    type: str = "function_call"
    id: str
    call_id: str
    name: str
    namespace: str | None = None
    arguments: str
    status: ItemStatus


class CustomToolCallItem(msgspec.Struct, kw_only=True):
    """A ``custom_tool_call`` output item: the free-form ``input`` the
    model gave a custom tool."""

    type: str = "custom_tool_call"
    id: str
    call_id: str
    name: str
    namespace: str | None = None
    input: str
    status: ItemStatus


OutputItem = Union[MessageItem, ReasoningItem, FunctionCallItem, CustomToolCallItem]
"""Any output item mlxd produces."""


# --- the response object -----------------------------------------------------------------


class InputTokensDetails(msgspec.Struct, kw_only=True):
    """``usage.input_tokens_details``: prompt tokens reused from the cache."""

    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(msgspec.Struct, kw_only=True):
    """``usage.output_tokens_details`` (the worker does not count reasoning
    tokens apart from the rest: always 0)."""

    reasoning_tokens: int = 0


class ResponseUsage(msgspec.Struct, kw_only=True):
    """Token counts of one response; ``total_tokens`` is input + output."""

    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


def response_usage(usage: Usage) -> ResponseUsage:
    """Return the Responses usage object for the chat-style ``usage``."""
    return ResponseUsage(
        input_tokens=usage.prompt_tokens,
        input_tokens_details=InputTokensDetails(cached_tokens=usage.prompt_tokens_details.cached_tokens),
        output_tokens=usage.completion_tokens,
        output_tokens_details=OutputTokensDetails(),
        total_tokens=usage.total_tokens,
    )


class IncompleteDetails(msgspec.Struct, kw_only=True):
    """Why a response is ``incomplete`` (mlxd: ``max_output_tokens``)."""

    reason: str


class ResponseErrorBody(msgspec.Struct, kw_only=True):
    """The ``error`` of a ``failed`` response."""

    code: str
    message: str


class ResponseBody(ResponseSettings, kw_only=True):
    """A whole ``response`` object: the echoed settings plus the result.

    ``completed_at`` is set only when ``status`` is ``completed``;
    ``incomplete_details`` only when it is ``incomplete``; ``error`` only
    when it is ``failed``; ``usage`` is null while in progress.
    """

    id: str
    object: str = "response"
    created_at: int
    model: str
    status: ResponseStatus
    completed_at: int | None = None
    error: ResponseErrorBody | None = None
    incomplete_details: IncompleteDetails | None = None
    output: list[OutputItem] = []
    usage: ResponseUsage | None = None


# --- stream events ---------------------------------------------------------------------


class LifecycleEvent(msgspec.Struct, kw_only=True):
    """``response.created`` / ``in_progress`` / ``completed`` /
    ``incomplete`` / ``failed``: the response object as it stands."""

    type: str
    response: ResponseBody
    sequence_number: int


class ItemEvent(msgspec.Struct, kw_only=True):
    """``response.output_item.added`` / ``.done``."""

    type: str
    output_index: int
    item: OutputItem
    sequence_number: int


class PartEvent(msgspec.Struct, kw_only=True):
    """``response.content_part.added`` / ``.done``."""

    type: str
    item_id: str
    output_index: int
    content_index: int = 0
    part: Union[OutputText, ReasoningText]
    sequence_number: int


class TextDeltaEvent(msgspec.Struct, kw_only=True):
    """``response.output_text.delta``."""

    type: str = "response.output_text.delta"
    item_id: str
    output_index: int
    content_index: int = 0
    delta: str
    logprobs: list[Any] = []
    sequence_number: int


class TextDoneEvent(msgspec.Struct, kw_only=True):
    """``response.output_text.done`` with the whole text."""

    type: str = "response.output_text.done"
    item_id: str
    output_index: int
    content_index: int = 0
    text: str
    logprobs: list[Any] = []
    sequence_number: int


class ReasoningDeltaEvent(msgspec.Struct, kw_only=True):
    """``response.reasoning_text.delta``."""

    type: str = "response.reasoning_text.delta"
    item_id: str
    output_index: int
    content_index: int = 0
    delta: str
    sequence_number: int


class ReasoningDoneEvent(msgspec.Struct, kw_only=True):
    """``response.reasoning_text.done`` with the whole reasoning text."""

    type: str = "response.reasoning_text.done"
    item_id: str
    output_index: int
    content_index: int = 0
    text: str
    sequence_number: int


class ArgumentsDeltaEvent(msgspec.Struct, kw_only=True):
    """``response.function_call_arguments.delta``."""

    type: str = "response.function_call_arguments.delta"
    item_id: str
    output_index: int
    delta: str
    sequence_number: int


class ArgumentsDoneEvent(msgspec.Struct, kw_only=True):
    """``response.function_call_arguments.done`` with the whole arguments."""

    type: str = "response.function_call_arguments.done"
    item_id: str
    output_index: int
    arguments: str
    sequence_number: int


class SummaryPartEvent(msgspec.Struct, kw_only=True):
    """``response.reasoning_summary_part.added`` / ``.done``."""

    type: str
    item_id: str
    output_index: int
    summary_index: int = 0
    part: SummaryText
    sequence_number: int


class SummaryDeltaEvent(msgspec.Struct, kw_only=True):
    """``response.reasoning_summary_text.delta``."""

    type: str = "response.reasoning_summary_text.delta"
    item_id: str
    output_index: int
    summary_index: int = 0
    delta: str
    sequence_number: int


class SummaryDoneEvent(msgspec.Struct, kw_only=True):
    """``response.reasoning_summary_text.done`` with the whole summary."""

    type: str = "response.reasoning_summary_text.done"
    item_id: str
    output_index: int
    summary_index: int = 0
    text: str
    sequence_number: int


class CustomInputDeltaEvent(msgspec.Struct, kw_only=True):
    """``response.custom_tool_call_input.delta``."""

    type: str = "response.custom_tool_call_input.delta"
    item_id: str
    output_index: int
    delta: str
    sequence_number: int


class CustomInputDoneEvent(msgspec.Struct, kw_only=True):
    """``response.custom_tool_call_input.done`` with the whole input."""

    type: str = "response.custom_tool_call_input.done"
    item_id: str
    output_index: int
    input: str
    sequence_number: int


class ErrorDetail(msgspec.Struct, kw_only=True):
    """The nested ``error`` object of an error event (what the OpenAI SDKs
    look for to raise ``APIError``)."""

    type: str = "server_error"
    code: str | None
    message: str
    param: str | None = None


class ErrorEvent(msgspec.Struct, kw_only=True):
    """``error``: the request failed mid-stream. Carries the fields of the
    SDK's ``ResponseErrorEvent`` plus the nested ``error`` object."""

    type: str = "error"
    code: str | None
    message: str
    param: str | None = None
    error: ErrorDetail
    sequence_number: int


Event = Union[
    LifecycleEvent,
    ItemEvent,
    PartEvent,
    TextDeltaEvent,
    TextDoneEvent,
    ReasoningDeltaEvent,
    ReasoningDoneEvent,
    ArgumentsDeltaEvent,
    ArgumentsDoneEvent,
    SummaryPartEvent,
    SummaryDeltaEvent,
    SummaryDoneEvent,
    CustomInputDeltaEvent,
    CustomInputDoneEvent,
    ErrorEvent,
]
"""Any stream event."""


def frames(events: list[Event]) -> bytes:
    """Return ``events`` as SSE frames, each ``event: <type>`` plus its JSON."""
    return b"".join(sse.json_frame(event, event=event.type) for event in events)


def encode(obj: object) -> bytes:
    """Return ``obj`` as compact JSON bytes."""
    return _encoder.encode(obj)
