"""The builder of a Responses API answer (streamed or whole).

:class:`ResponseBuilder` turns one request's
:class:`~shared.protocol.RequestOutput` stream into output items and into
the stream events that build them, numbered by ``sequence_number`` from 0:
``response.created``, ``response.in_progress``; per item
``response.output_item.added``, then for a message or reasoning item
``response.content_part.added``, ``response.output_text.delta`` /
``response.reasoning_text.delta`` ..., the matching ``.done``,
``response.content_part.done``; for a function call
``response.function_call_arguments.delta`` ... and ``.done``; then
``response.output_item.done``. Whenever the kind of output changes
(reasoning, text, another tool call) the current item is finished and the
next one started, so a model that thinks, answers and then calls two tools
yields four items; an item is only created once it has content. The stream
ends with ``response.completed`` (finish ``stop`` or ``tool_calls``) or
``response.incomplete`` (finish ``length``: ``incomplete_details.reason``
is ``max_output_tokens`` and the item cut short has status
``incomplete``). A request that fails after streaming started ends with an
``error`` event and ``response.failed``.

It is the :class:`~gateway.frontend.answer_driver.AnswerBuilder` of
``POST /v1/responses``: the streamed path sends its events, the plain path
drains the same builder and answers :attr:`ResponseBuilder.final`, so both
produce identical output. Tool calls are assembled by
:class:`~gateway.frontend.tool_calls.ToolCallAssembler` (``call_id`` ``call_…``).
Shapes come from :mod:`gateway.responses.format`. Event loop only; one
builder per request.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import msgspec

from gateway.core.errors import APIError
from gateway.core.ids import new_id
from gateway.frontend.answer_driver import TokenTally
from gateway.frontend.custom_tools import custom_input
from gateway.frontend.request_flow import FinalReason
from gateway.frontend.tool_calls import RESPONSES_CALL_IDS, AssembledCall, ToolCallAssembler
from gateway.openai.format import Usage, usage_of
from gateway.openai.logprobs import chat_logprobs
from gateway.responses.encrypted_reasoning import seal
from gateway.responses.format import (
    ArgumentsDeltaEvent,
    ArgumentsDoneEvent,
    CustomInputDeltaEvent,
    CustomInputDoneEvent,
    CustomToolCallItem,
    ErrorDetail,
    ErrorEvent,
    Event,
    FunctionCallItem,
    IncompleteDetails,
    ItemEvent,
    ItemStatus,
    LifecycleEvent,
    MessageItem,
    OutputItem,
    OutputOptions,
    OutputText,
    PartEvent,
    ReasoningDeltaEvent,
    ReasoningDoneEvent,
    ReasoningItem,
    ReasoningText,
    ResponseBody,
    ResponseErrorBody,
    ResponseSettings,
    ResponseStatus,
    ResponseUsage,
    SummaryDeltaEvent,
    SummaryDoneEvent,
    SummaryPartEvent,
    SummaryText,
    TextDeltaEvent,
    TextDoneEvent,
    frames,
    response_usage,
)
from gateway.responses.tools import ToolRef
from shared.protocol import RequestOutput, ToolCallDelta

log = logging.getLogger("mlxd.gateway.responses")

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
    call: AssembledCall | None = None
    ref: ToolRef | None = None
    logprobs: list[Any] = field(default_factory=list)

    @property
    def text(self) -> str:
        """Everything received so far, joined (a tool call's arguments)."""
        return self.call.arguments if self.call is not None else "".join(self.pieces)

    @property
    def call_id(self) -> str:
        """A tool call's ``call_id``."""
        return (self.call.id or "") if self.call is not None else ""

    @property
    def name(self) -> str:
        """A tool call's name as the model gave it."""
        return self.call.name if self.call is not None else ""

    @property
    def tool_index(self) -> int:
        """A tool call's index as the worker numbered it (-1: not a call)."""
        return self.call.index if self.call is not None else -1

    @property
    def custom(self) -> bool:
        """Whether this is a call of a custom tool."""
        return self.ref is not None and self.ref.kind == "custom"


def _render(item: _OpenItem, status: ItemStatus, options: OutputOptions, parts: bool = True) -> OutputItem:
    """The output item for ``item`` with ``status``; without ``parts`` (as
    announced by ``output_item.added``) a message or reasoning item has no
    content part yet and a tool call no arguments yet."""
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
    arguments = item.text if parts else ""
    return FunctionCallItem(
        id=item.id, call_id=item.call_id, name=name, namespace=namespace, arguments=arguments, status=status
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
    worker broke its ordering promise) is logged and dropped. Calls are
    assembled by one :class:`~gateway.frontend.tool_calls.ToolCallAssembler`: a
    call without an id, or with one already used, gets a fresh ``call_…``
    id.
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
        self._calls = ToolCallAssembler(RESPONSES_CALL_IDS)
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
            events += self._start(_OpenItem(kind, new_id("msg_" if kind == _MESSAGE else "rs_"), self._next_index()))
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

    def _append_call(self, piece: ToolCallDelta) -> list[Event]:
        """Add a piece of tool call ``piece.index``, starting its item if new."""
        events: list[Event] = []
        item = self._open
        if item is None or item.kind != _CALL or item.tool_index != piece.index:
            if piece.index in self._finished_calls:
                log.error("tool call %d continued after it was finished; piece dropped", piece.index)
                return events
            events += self.close("completed")
            call, _ = self._calls.add(piece)
            events += self._start(self._new_call(call))
            item = self._open
            assert item is not None
        else:
            had_name = bool(item.name)
            self._calls.add(piece)
            if not had_name and item.name:
                item.ref = self._options.tools.get(item.name)
        if piece.arguments:
            if not item.custom:
                events.append(
                    ArgumentsDeltaEvent(
                        item_id=item.id,
                        output_index=item.output_index,
                        delta=piece.arguments,
                        sequence_number=self._seq(),
                    )
                )
        return events

    def _new_call(self, call: AssembledCall) -> _OpenItem:
        """The open item for the new tool call ``call``."""
        ref = self._options.tools.get(call.name)
        return _OpenItem(
            _CALL,
            new_id("ctc_" if ref is not None and ref.kind == "custom" else "fc_"),
            self._next_index(),
            call=call,
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


ErrorOf = Callable[[RequestOutput], APIError]
"""The endpoint's client error for an ``error``/``abort`` output."""


class ResponseBuilder:
    """One response from start to end, for the streamed and the plain path
    (an :class:`~gateway.frontend.answer_driver.AnswerBuilder` of one choice).

    ``head`` names the response, ``settings`` are echoed, ``clock`` gives
    ``completed_at``, ``options`` shape the items (:class:`OutputOptions`)
    and ``error_of`` is the endpoint's error for a failing output. Use:
    :meth:`start` once (the ``created``/``in_progress`` events); :meth:`add`
    for every output of the request that does not end it in error; then
    either :meth:`finish` or :meth:`fail` with the output that ended the
    request in error. Each returns the events to stream (a plain response
    ignores them); :attr:`final` is then the finished response object.
    """

    choices = 1

    def __init__(
        self,
        head: ResponseHead,
        settings: ResponseSettings,
        clock: Callable[[], float] = time.time,
        options: OutputOptions | None = None,
        error_of: ErrorOf | None = None,
    ) -> None:
        self._head = head
        self._settings = settings
        self._clock = clock
        self._error_of = error_of
        self._seq = _Sequence()
        self._output = OutputAssembler(self._seq, options)
        self._reason: FinishReason = "stop"
        self.tally = TokenTally()
        self.final: ResponseBody | None = None

    def start(self, first: RequestOutput | None = None) -> list[Event]:
        """The opening events: ``response.created``, ``response.in_progress``."""
        body = self._body("in_progress", [])
        return [self._lifecycle("response.created", body), self._lifecycle("response.in_progress", body)]

    def add(self, output: RequestOutput) -> list[Event]:
        """The events for the content of ``output`` (its finish reason is
        kept for :meth:`finish`)."""
        self.tally.add(output)
        if output.ends_choice:
            self._reason = output.finish_reason  # type: ignore[assignment]
        return self._output.add(output)

    def finish(self) -> list[Event]:
        """End the response: finish ``length`` makes it ``incomplete`` (the
        open item too), anything else ``completed``. Returns the closing
        events, ending with ``response.completed`` or ``response.incomplete``."""
        incomplete = self._reason == "length"
        events = self._output.close("incomplete" if incomplete else "completed")
        status: ResponseStatus = "incomplete" if incomplete else "completed"
        body = self._body(status, self._output.items(), response_usage(self.usage()))
        if incomplete:
            body.incomplete_details = IncompleteDetails(reason="max_output_tokens")
        else:
            body.completed_at = int(self._clock())
        self.final = body
        events.append(self._lifecycle(f"response.{status}", body))
        return events

    def fail(self, output: RequestOutput) -> list[Event]:
        """End the response with the error of ``output`` (after any content
        it still carries): an ``error`` event, then ``response.failed`` whose
        output holds the items so far (the open one ``incomplete``)."""
        assert self._error_of is not None, "a ResponseBuilder that may fail needs error_of"
        err = self._error_of(output)
        events = self._output.add(output) if output.index == 0 else []
        code = err.code or output.error_kind or "internal_error"
        client_fault = err.status < 500
        kind = "invalid_request_error" if client_fault else "server_error"
        detail = ErrorDetail(type=kind, code=code, message=err.message, param=err.param)
        error = ErrorEvent(code=code, message=err.message, param=err.param, error=detail, sequence_number=self._seq())
        body = self._body("failed", self._output.items("incomplete"), response_usage(self.usage()))
        body.error = ResponseErrorBody(code="invalid_prompt" if client_fault else "server_error", message=err.message)
        self.final = body
        return events + [error, self._lifecycle("response.failed", body)]

    def frames(self, batch: list[Event]) -> bytes:
        """``batch`` as SSE frames."""
        return frames(batch)

    def usage(self) -> Usage:
        """The usage of everything added so far."""
        return usage_of(self.tally)

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
