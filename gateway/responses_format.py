"""OpenAI Responses API objects and stream events (``POST /v1/responses``).

A response's ``output`` is a list of items, in the order the model produced
them: a ``reasoning`` item (its text as one ``reasoning_text`` content part;
``summary`` is always empty), a ``message`` item (one ``output_text`` part,
``annotations`` always empty, ``logprobs`` filled only when asked for) and one ``function_call``
item per tool call (``call_id`` is the worker's tool-call id). Whenever the
kind of output changes (reasoning, text, another tool call) the current item
is finished and the next one started, so a model that thinks, answers and
then calls two tools yields four items; an item is only created once it has
content.

:class:`ResponseBuilder` turns one request's
:class:`~shared.protocol.RequestOutput` stream into those items and into
the stream events that build them, numbered by ``sequence_number`` from 0:
``response.created``, ``response.in_progress``; per item
``response.output_item.added``, then for a message or reasoning item
``response.content_part.added``, ``response.output_text.delta`` /
``response.reasoning_text.delta`` ..., the matching ``.done``,
``response.content_part.done``; for a function call
``response.function_call_arguments.delta`` ... and ``.done``; then
``response.output_item.done``. The stream ends with ``response.completed``
(finish ``stop`` or ``tool_calls``) or ``response.incomplete`` (finish
``length``: ``incomplete_details.reason`` is ``max_output_tokens`` and the
item cut short has status ``incomplete``). A request that fails after
streaming started ends with an ``error`` event and ``response.failed``.
The non-streamed path feeds the same builder and answers the final
response object, so both paths produce identical output.

Every response object echoes the request's settings
(:class:`ResponseSettings`, built by :mod:`gateway.responses_translate`) with
null/defaults where unset. Nothing is stored: ``store`` is always false.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Union

import msgspec

from gateway import sse
from gateway.custom_tools import custom_input
from gateway.encrypted_reasoning import seal
from gateway.openai_format import Usage, chat_logprobs
from gateway.request_flow import FinalReason
from gateway.responses_tools import ToolRef
from shared.protocol import RequestOutput, ToolCallDelta

log = logging.getLogger("mlxd.gateway.responses")

ItemStatus = Literal["in_progress", "completed", "incomplete"]
"""Status of one output item."""

ResponseStatus = Literal["in_progress", "completed", "incomplete", "failed"]
"""Status of a response as mlxd reports it."""

_encoder = msgspec.json.Encoder()


def new_id(prefix: str) -> str:
    """Return a fresh identifier ``<prefix>_<32 hex digits>`` (``resp``,
    ``msg``, ``rs``, ``fc``, ``call``)."""
    return f"{prefix}_{uuid.uuid4().hex}"


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
    see :func:`gateway.responses_translate.response_settings`; no penalties,
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
    (:class:`~gateway.responses_tools.ToolRef`): a call of a ``custom`` tool
    becomes a ``custom_tool_call`` item, a call of a namespaced tool names
    its ``namespace``. ``summary``: reasoning text goes into the reasoning
    item's ``summary`` (one ``summary_text`` part, streamed as
    ``response.reasoning_summary_*`` events) instead of its ``content``.
    ``encrypted_reasoning``: finished reasoning items carry
    ``encrypted_content`` (:func:`gateway.encrypted_reasoning.seal` of
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


# --- assembling output items ------------------------------------------------------------

_MESSAGE, _REASONING, _CALL = "message", "reasoning", "function_call"


@dataclass
class _OpenItem:
    """The output item being built: its kind, ids, position and text so far
    (for a tool call, its arguments; ``ref`` is the custom or namespaced
    tool the call is for, None for a plain function)."""

    kind: str
    id: str
    output_index: int
    pieces: list[str] = field(default_factory=list)
    call_id: str = ""
    name: str = ""
    tool_index: int = -1
    ref: ToolRef | None = None
    logprobs: list[Any] = field(default_factory=list)

    @property
    def text(self) -> str:
        """Everything received so far, joined."""
        return "".join(self.pieces)

    @property
    def custom(self) -> bool:
        """Whether this is a call of a custom tool."""
        return self.ref is not None and self.ref.kind == "custom"


def _render(item: _OpenItem, status: ItemStatus, options: OutputOptions, parts: bool = True) -> OutputItem:
    """The output item for ``item`` with ``status``; without ``parts`` a
    message or reasoning item has no content part yet (as announced by
    ``output_item.added``, before ``content_part.added``)."""
    if item.kind == _MESSAGE:
        content = [OutputText(text=item.text, logprobs=list(item.logprobs))] if parts else []
        return MessageItem(id=item.id, status=status, content=content)
    if item.kind == _REASONING:
        sealed = seal(item.text) if options.encrypted_reasoning and parts else None
        if options.summary:
            summary = [SummaryText(text=item.text)] if parts else []
            return ReasoningItem(id=item.id, summary=summary, content=[], encrypted_content=sealed, status=status)
        content = [ReasoningText(text=item.text)] if parts else []
        return ReasoningItem(id=item.id, content=content, encrypted_content=sealed, status=status)
    name, namespace = item.name, None
    if item.ref is not None:
        name, namespace = item.ref.name, item.ref.namespace
    if item.custom:
        text = custom_input(item.text) if parts else ""
        return CustomToolCallItem(
            id=item.id, call_id=item.call_id, name=name, namespace=namespace, input=text, status=status
        )
    return FunctionCallItem(
        id=item.id, call_id=item.call_id, name=name, namespace=namespace, arguments=item.text, status=status
    )


class _Sequence:
    """Hands out a stream's ``sequence_number`` values: 0, 1, 2, ..."""

    def __init__(self) -> None:
        self._next = 0

    def __call__(self) -> int:
        """The next number."""
        value = self._next
        self._next += 1
        return value


class OutputAssembler:
    """Builds a response's output items from its outputs, with the events.

    :meth:`add` takes each output (reasoning first, then text, then tool-call
    pieces, as a model produces them within one step) and returns the events
    it causes; :meth:`close` finishes the open item; :meth:`items` is the
    output list. A piece of a tool call that was already finished (the
    worker broke its ordering promise) is logged and dropped. A tool call
    without an id, or with one already used, gets a fresh ``call_…`` id.
    ``options`` shapes reasoning and tool-call items (:class:`OutputOptions`);
    a custom tool call's input is known only once its arguments are
    complete, so it streams as one ``custom_tool_call_input.delta`` when the
    call ends.
    """

    def __init__(self, sequence: _Sequence, options: OutputOptions | None = None) -> None:
        self._seq = sequence
        self._options = options or OutputOptions()
        self._done: list[OutputItem] = []
        self._open: _OpenItem | None = None
        self._finished_calls: set[int] = set()
        self._call_ids: set[str] = set()
        self._pending_logprobs: list[Any] = []

    def add(self, output: RequestOutput) -> list[Event]:
        """Take the content of one output; return the events it causes."""
        events: list[Event] = []
        self._note_logprobs(output)
        if output.reasoning:
            events += self._append(_REASONING, output.reasoning)
        if output.text:
            events += self._append(_MESSAGE, output.text)
        for call in output.tool_calls or ():
            events += self._append_call(call)
        return events

    def close(self, status: ItemStatus) -> list[Event]:
        """Finish the open item (if any) with ``status``; return its events."""
        item = self._open
        if item is None:
            return []
        self._open = None
        final = _render(item, status, self._options)
        self._done.append(final)
        if item.kind == _CALL:
            self._finished_calls.add(item.tool_index)
        events = self._done_events(item)
        events.append(self._item_event("response.output_item.done", item, final))
        return events

    def items(self, open_status: ItemStatus = "incomplete") -> list[OutputItem]:
        """Every item so far; the open one (if any) with ``open_status``."""
        if self._open is None:
            return list(self._done)
        return [*self._done, _render(self._open, open_status, self._options)]

    # --- internals -------------------------------------------------------------------

    def _note_logprobs(self, output: RequestOutput) -> None:
        """Keep ``output``'s token log-probabilities (when asked for) for the
        next text delta; an output of reasoning only has reasoning tokens,
        which are dropped (and so are those waiting before them)."""
        if not self._options.logprobs:
            return
        if output.reasoning and not output.text:
            self._pending_logprobs = []
            return
        self._pending_logprobs += msgspec.to_builtins(chat_logprobs(output.logprobs or ()).content)

    def _next_index(self) -> int:
        """The ``output_index`` of the next item."""
        return len(self._done) + (self._open is not None)

    def _append(self, kind: str, text: str) -> list[Event]:
        """Add ``text`` to the open item of ``kind``, starting one if needed."""
        events: list[Event] = []
        if self._open is None or self._open.kind != kind:
            events += self.close("completed")
            events += self._start(_OpenItem(kind, new_id("msg" if kind == _MESSAGE else "rs"), self._next_index()))
        item = self._open
        assert item is not None
        item.pieces.append(text)
        where = {"item_id": item.id, "output_index": item.output_index, "delta": text, "sequence_number": self._seq()}
        if kind == _MESSAGE:
            logprobs, self._pending_logprobs = self._pending_logprobs, []
            item.logprobs += logprobs
            events.append(TextDeltaEvent(**where, logprobs=logprobs))
        elif self._options.summary:
            events.append(SummaryDeltaEvent(**where))
        else:
            events.append(ReasoningDeltaEvent(**where))
        return events

    def _append_call(self, call: ToolCallDelta) -> list[Event]:
        """Add a piece of tool call ``call.index``, starting its item if new."""
        events: list[Event] = []
        item = self._open
        if item is None or item.kind != _CALL or item.tool_index != call.index:
            if call.index in self._finished_calls:
                log.error("tool call %d continued after it was finished; piece dropped", call.index)
                return events
            events += self.close("completed")
            events += self._start(self._new_call(call))
            item = self._open
            assert item is not None
        elif call.name and not item.name:
            item.name = call.name
            item.ref = self._options.tools.get(call.name)
        if call.arguments:
            item.pieces.append(call.arguments)
            if not item.custom:
                events.append(
                    ArgumentsDeltaEvent(
                        item_id=item.id,
                        output_index=item.output_index,
                        delta=call.arguments,
                        sequence_number=self._seq(),
                    )
                )
        return events

    def _new_call(self, call: ToolCallDelta) -> _OpenItem:
        """The open item for a new tool call (with a unique ``call_id``)."""
        call_id = call.id if call.id and call.id not in self._call_ids else new_id("call")
        self._call_ids.add(call_id)
        name = call.name or ""
        ref = self._options.tools.get(name)
        return _OpenItem(
            _CALL,
            new_id("ctc" if ref is not None and ref.kind == "custom" else "fc"),
            self._next_index(),
            call_id=call_id,
            name=name,
            tool_index=call.index,
            ref=ref,
        )

    def _start(self, item: _OpenItem) -> list[Event]:
        """Open ``item``; return its ``added`` events."""
        self._open = item
        announced = _render(item, "in_progress", self._options, parts=False)
        events: list[Event] = [self._item_event("response.output_item.added", item, announced)]
        if item.kind == _MESSAGE:
            events.append(self._part_event("response.content_part.added", item, OutputText(text="")))
        elif item.kind == _REASONING and self._options.summary:
            events.append(self._summary_part_event("response.reasoning_summary_part.added", item, ""))
        elif item.kind == _REASONING:
            events.append(self._part_event("response.content_part.added", item, ReasoningText(text="")))
        return events

    def _done_events(self, item: _OpenItem) -> list[Event]:
        """The ``.done`` events of ``item``'s content (before its item event)."""
        text, where = item.text, {"item_id": item.id, "output_index": item.output_index}
        if item.custom:
            value = custom_input(text)
            return [
                CustomInputDeltaEvent(**where, delta=value, sequence_number=self._seq()),
                CustomInputDoneEvent(**where, input=value, sequence_number=self._seq()),
            ]
        if item.kind == _CALL:
            return [ArgumentsDoneEvent(**where, arguments=text, sequence_number=self._seq())]
        if item.kind == _REASONING and self._options.summary:
            done_summary = SummaryDoneEvent(**where, text=text, sequence_number=self._seq())
            return [done_summary, self._summary_part_event("response.reasoning_summary_part.done", item, text)]
        if item.kind == _MESSAGE:
            done: Event = TextDoneEvent(**where, text=text, logprobs=list(item.logprobs), sequence_number=self._seq())
            part: OutputText | ReasoningText = OutputText(text=text, logprobs=list(item.logprobs))
        else:
            done = ReasoningDoneEvent(**where, text=text, sequence_number=self._seq())
            part = ReasoningText(text=text)
        return [done, self._part_event("response.content_part.done", item, part)]

    def _item_event(self, kind: str, item: _OpenItem, rendered: OutputItem) -> ItemEvent:
        """An ``output_item`` event for ``item``."""
        return ItemEvent(type=kind, output_index=item.output_index, item=rendered, sequence_number=self._seq())

    def _part_event(self, kind: str, item: _OpenItem, part: OutputText | ReasoningText) -> PartEvent:
        """A ``content_part`` event for ``item``."""
        return PartEvent(
            type=kind, item_id=item.id, output_index=item.output_index, part=part, sequence_number=self._seq()
        )

    def _summary_part_event(self, kind: str, item: _OpenItem, text: str) -> SummaryPartEvent:
        """A ``reasoning_summary_part`` event for ``item``."""
        return SummaryPartEvent(
            type=kind,
            item_id=item.id,
            output_index=item.output_index,
            part=SummaryText(text=text),
            sequence_number=self._seq(),
        )


# --- one response ------------------------------------------------------------------------------


FinishReason = FinalReason
"""How a successful request ended."""


@dataclass(frozen=True)
class ResponseHead:
    """What identifies one response: its ``id`` (also the worker's request
    id), ``created_at`` (Unix seconds) and canonical ``model``."""

    id: str
    created_at: int
    model: str


class ResponseBuilder:
    """One response from start to end, for the streamed and the plain path.

    Use: :meth:`start` once (the ``created``/``in_progress`` events);
    :meth:`add` for every output of the request that does not end it in
    error; then either :meth:`finish` with its finish reason and usage, or
    :meth:`fail` when it ended in error. Each returns the events to stream
    (a plain response ignores them); :attr:`final` is the finished response
    object.
    """

    def __init__(
        self,
        head: ResponseHead,
        settings: ResponseSettings,
        clock: Callable[[], float] = time.time,
        options: OutputOptions | None = None,
    ) -> None:
        self._head = head
        self._settings = settings
        self._clock = clock
        self._seq = _Sequence()
        self._output = OutputAssembler(self._seq, options)
        self.final: ResponseBody | None = None

    def start(self) -> list[Event]:
        """The opening events: ``response.created``, ``response.in_progress``."""
        body = self._body("in_progress", [])
        return [self._lifecycle("response.created", body), self._lifecycle("response.in_progress", body)]

    def add(self, output: RequestOutput) -> list[Event]:
        """The events for the content of ``output``."""
        return self._output.add(output)

    def finish(self, reason: FinishReason, usage: Usage) -> list[Event]:
        """End the response: ``length`` makes it ``incomplete`` (the open
        item too), anything else ``completed``. Returns the closing events,
        ending with ``response.completed`` or ``response.incomplete``."""
        incomplete = reason == "length"
        events = self._output.close("incomplete" if incomplete else "completed")
        status: ResponseStatus = "incomplete" if incomplete else "completed"
        body = self._body(status, self._output.items(), response_usage(usage))
        if incomplete:
            body.incomplete_details = IncompleteDetails(reason="max_output_tokens")
        else:
            body.completed_at = int(self._clock())
        self.final = body
        events.append(self._lifecycle(f"response.{status}", body))
        return events

    def fail(self, message: str, code: str | None, param: str | None, status: int, usage: Usage) -> list[Event]:
        """End the response in error (``status`` is the HTTP status the error
        would have had): an ``error`` event, then ``response.failed`` whose
        output holds the items so far (the open one ``incomplete``)."""
        client_fault = status < 500
        kind = "invalid_request_error" if client_fault else "server_error"
        detail = ErrorDetail(type=kind, code=code, message=message, param=param)
        error = ErrorEvent(code=code, message=message, param=param, error=detail, sequence_number=self._seq())
        body = self._body("failed", self._output.items("incomplete"), response_usage(usage))
        body.error = ResponseErrorBody(code="invalid_prompt" if client_fault else "server_error", message=message)
        self.final = body
        return [error, self._lifecycle("response.failed", body)]

    def _body(
        self, status: ResponseStatus, output: list[OutputItem], usage: ResponseUsage | None = None
    ) -> ResponseBody:
        """A response object with the echoed settings."""
        return ResponseBody(
            **msgspec.structs.asdict(self._settings),
            id=self._head.id,
            created_at=self._head.created_at,
            model=self._head.model,
            status=status,
            output=output,
            usage=usage,
        )

    def _lifecycle(self, kind: str, body: ResponseBody) -> LifecycleEvent:
        """A lifecycle event carrying ``body``."""
        return LifecycleEvent(type=kind, response=body, sequence_number=self._seq())


def encode(obj: object) -> bytes:
    """Return ``obj`` as compact JSON bytes."""
    return _encoder.encode(obj)
