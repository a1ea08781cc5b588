"""Anthropic Messages responses and stream events, as bytes.

Errors are rendered by :mod:`gateway.error_shapes` (Anthropic's 529
``overloaded_error`` for mlxd's 503s included); a stream's error event is
:meth:`MessageEventStream.error`.

Content: a turn's output becomes content blocks in the order the model
produces them: reasoning becomes a ``thinking`` block (``signature`` is
always empty: mlxd does not sign reasoning), text a ``text`` block, and each
tool call a ``tool_use`` block whose ``input`` is the call's arguments
parsed as a JSON object. The non-streamed message (:class:`MessageCollector`)
holds at most one thinking block, then one text block, then the tool calls
by index; a stream (:class:`MessageEventStream`) starts a new block whenever
the kind of output changes.

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
import uuid
from typing import Any, Literal, Union

import msgspec

from gateway import sse
from gateway.error_shapes import anthropic_error_frame
from gateway.errors import APIError
from shared.protocol import RequestOutput, ToolCallDelta

log = logging.getLogger("mlxd.gateway.anthropic")

_encoder = msgspec.json.Encoder()


def encode(obj: object) -> bytes:
    """Return ``obj`` as compact JSON bytes (msgspec)."""
    return _encoder.encode(obj)


def new_id(prefix: str) -> str:
    """A fresh random id such as ``msg_<32 hex>`` or ``req_<32 hex>``."""
    return prefix + uuid.uuid4().hex


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


class UsageTally:
    """Running token counts of one single-choice request: feed it every
    output (:meth:`add`); the counts are the largest running totals seen."""

    def __init__(self) -> None:
        self.prompt = 0
        self.cached = 0
        self.completion = 0

    def add(self, output: RequestOutput) -> None:
        """Account for one output."""
        self.prompt = max(self.prompt, output.prompt_tokens)
        self.cached = max(self.cached, output.cached_tokens)
        self.completion = max(self.completion, output.completion_tokens)

    def usage(self) -> Usage:
        """The usage object for everything added so far."""
        cached = min(self.cached, self.prompt)
        return Usage(
            input_tokens=self.prompt - cached,
            output_tokens=self.completion,
            cache_read_input_tokens=cached,
        )

    def delta_usage(self) -> DeltaUsage:
        """The ``message_delta`` usage for everything added so far."""
        usage = self.usage()
        return DeltaUsage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_input_tokens=usage.cache_read_input_tokens,
        )


# --- tool calls ----------------------------------------------------------------------


TOOL_USE_PREFIX = "toolu_"
"""What every tool-use id in a response starts with."""


def tool_use_id(worker_id: str | None) -> str:
    """The response id of a tool call the worker named ``worker_id``: its
    random part behind ``toolu_`` (a fresh id when the worker gave none)."""
    if not worker_id:
        return new_id(TOOL_USE_PREFIX)
    if worker_id.startswith(TOOL_USE_PREFIX):
        return worker_id
    return TOOL_USE_PREFIX + worker_id.removeprefix("call_")


class _Call:
    """One tool call being assembled from its pieces."""

    def __init__(self, piece: ToolCallDelta) -> None:
        if piece.id is None or piece.name is None:
            log.error("tool call %d started without its id or name", piece.index)
        self.id = tool_use_id(piece.id)
        self.name = piece.name or ""
        self.arguments: list[str] = []


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


class MessageCollector:
    """Collects a single-choice request's outputs into one ``message``.

    :meth:`add` every output that does not end the request, until
    :attr:`done`; then :meth:`body`. ``omit_thinking``: the thinking block
    carries no text (``thinking.display: "omitted"``); ``applied_edits``
    (None: the request had no context management) become the message's
    ``context_management``.
    """

    def __init__(self, omit_thinking: bool = False, applied_edits: list[dict[str, Any]] | None = None) -> None:
        self.tally = UsageTally()
        self._omit_thinking = omit_thinking
        self._applied_edits = applied_edits
        self._reasoning: list[str] = []
        self._text: list[str] = []
        self._calls: dict[int, _Call] = {}
        self._finish: RequestOutput | None = None

    def add(self, output: RequestOutput) -> None:
        """Take one output that does not end the request."""
        self.tally.add(output)
        if output.reasoning:
            self._reasoning.append(output.reasoning)
        if output.text:
            self._text.append(output.text)
        for piece in output.tool_calls or ():
            call = self._calls.get(piece.index)
            if call is None:
                call = self._calls[piece.index] = _Call(piece)
            call.arguments.append(piece.arguments)
        if output.ends_choice:
            self._finish = output

    @property
    def done(self) -> bool:
        """Whether the choice has had its final output."""
        return self._finish is not None

    def content(self) -> list[ContentBlock]:
        """The content blocks: thinking, text, then tool calls by index.

        Raises:
            APIError: 500 as :func:`tool_input`.
        """
        blocks: list[ContentBlock] = []
        if self._reasoning:
            blocks.append(ThinkingContent(thinking="" if self._omit_thinking else "".join(self._reasoning)))
        if self._text:
            blocks.append(TextContent(text="".join(self._text)))
        for index in sorted(self._calls):
            call = self._calls[index]
            blocks.append(ToolUseContent(id=call.id, name=call.name, input=tool_input("".join(call.arguments))))
        return blocks

    def body(self, message_id: str, model: str) -> bytes:
        """The JSON of the finished ``message`` (call once :attr:`done`).

        Raises:
            APIError: 500 as :func:`tool_input`.
        """
        finish = self._finish
        reason, sequence = stop_reason(finish.finish_reason, finish.stop_sequence) if finish else ("end_turn", None)
        message = new_message(
            self._applied_edits,
            id=message_id,
            model=model,
            content=self.content(),
            stop_reason=reason,
            stop_sequence=sequence,
            usage=self.tally.usage(),
        )
        return encode(message)


def count_tokens_body(input_tokens: int, original_input_tokens: int | None = None) -> bytes:
    """The JSON of a ``count_tokens`` answer; with ``original_input_tokens``
    (the count before context-management edits) also its
    ``context_management`` object."""
    if original_input_tokens is None:
        return encode({"input_tokens": input_tokens})
    context = {"original_input_tokens": original_input_tokens}
    return encode({"input_tokens": input_tokens, "context_management": context})


# --- the event stream --------------------------------------------------------------------

_DELTA_HEAD = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
_DELTA_KINDS = {
    "thinking": b',"delta":{"type":"thinking_delta","thinking":',
    "text": b',"delta":{"type":"text_delta","text":',
    "tool": b',"delta":{"type":"input_json_delta","partial_json":',
}
_DELTA_TAIL = b"}}" + sse.FRAME_END

BlockKey = tuple[str, int]
"""Which block is open: ``("thinking", 0)``, ``("text", 0)`` or
``("tool", call index)``."""


class MessageEventStream:
    """Builds the SSE frames of one streamed message, every frame with its
    ``event:`` line.

    Order of use: :meth:`start` with the first output (``message_start``
    with the usage known so far, then ``ping``); :meth:`output` for every
    output that does not end the request (``content_block_start`` /
    ``content_block_delta`` / ``content_block_stop`` as the kind of output
    changes: reasoning, text, tool call k); then either :meth:`finish` with
    the final output (closes the open block, ``message_delta`` with stop
    reason and cumulative usage, ``message_stop``) or :meth:`error`.
    ``omit_thinking`` and ``applied_edits`` as for :class:`MessageCollector`
    (an omitted thinking block has no ``thinking_delta``; the edits go into
    ``message_start`` and ``message_delta``).
    """

    def __init__(
        self,
        message_id: str,
        model: str,
        omit_thinking: bool = False,
        applied_edits: list[dict[str, Any]] | None = None,
    ) -> None:
        self._message_id = message_id
        self._model = model
        self._omit_thinking = omit_thinking
        self._applied_edits = applied_edits
        self.tally = UsageTally()
        self._open: BlockKey | None = None
        self._open_index = -1
        self._blocks = 0
        self._tool_blocks: dict[int, int] = {}

    def start(self, first: RequestOutput) -> bytes:
        """``message_start`` (usage from ``first``) and a ``ping``."""
        self.tally.add(first)
        message = new_message(
            self._applied_edits, id=self._message_id, model=self._model, content=[], usage=self.tally.usage()
        )
        return sse.json_frame({"type": "message_start", "message": message}, event="message_start") + (
            sse.json_frame({"type": "ping"}, event="ping")
        )

    def output(self, output: RequestOutput) -> bytes:
        """The frames for ``output``'s reasoning, text and tool-call pieces,
        in that order."""
        self.tally.add(output)
        frames = b""
        if output.reasoning:
            frames += self._enter(("thinking", 0), {"type": "thinking", "thinking": "", "signature": ""})
            if not self._omit_thinking:
                frames += self._delta("thinking", self._open_index, output.reasoning)
        if output.text:
            frames += self._enter(("text", 0), {"type": "text", "text": "", "citations": None})
            frames += self._delta("text", self._open_index, output.text)
        for piece in output.tool_calls or ():
            frames += self._tool_piece(piece)
        return frames

    def finish(self, output: RequestOutput) -> bytes:
        """Close the open block, then ``message_delta`` and ``message_stop``
        for the final ``output`` (already passed to :meth:`output`)."""
        reason, sequence = stop_reason(output.finish_reason, output.stop_sequence)
        delta: dict[str, Any] = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence, "stop_details": None, "container": None},
            "usage": self.tally.delta_usage(),
        }
        if self._applied_edits is not None:
            delta["context_management"] = {"applied_edits": self._applied_edits}
        return (
            self._close()
            + sse.json_frame(delta, event="message_delta")
            + sse.json_frame({"type": "message_stop"}, event="message_stop")
        )

    def error(self, err: APIError) -> bytes:
        """The ``event: error`` frame for ``err`` (status mapped as for
        non-streamed errors, :func:`gateway.error_shapes.anthropic_error_frame`)."""
        return anthropic_error_frame(err)

    def _tool_piece(self, piece: ToolCallDelta) -> bytes:
        """Frames for one piece of tool call ``piece.index``: a new call
        closes the open block and starts a ``tool_use`` block; arguments
        become ``input_json_delta`` fragments."""
        block = self._tool_blocks.get(piece.index)
        frames = b""
        if block is None:
            call = _Call(piece)
            start = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
            frames = self._enter(("tool", piece.index), start)
            block = self._tool_blocks[piece.index] = self._open_index
        elif self._open != ("tool", piece.index):
            log.error("tool call %d continued after a later block started", piece.index)
        if piece.arguments:
            frames += self._delta("tool", block, piece.arguments)
        return frames

    def _enter(self, key: BlockKey, content_block: dict[str, Any]) -> bytes:
        """Make ``key`` the open block: nothing if it already is, otherwise
        close the open one and start a new block with ``content_block``."""
        if self._open == key:
            return b""
        frames = self._close()
        self._open, self._open_index = key, self._blocks
        self._blocks += 1
        start = {"type": "content_block_start", "index": self._open_index, "content_block": content_block}
        return frames + sse.json_frame(start, event="content_block_start")

    def _close(self) -> bytes:
        """Close the open block, if any (a thinking block gets its empty
        ``signature_delta`` first)."""
        if self._open is None:
            return b""
        index = self._open_index
        frames = b""
        if self._open[0] == "thinking":
            signature = {"type": "signature_delta", "signature": ""}
            delta = {"type": "content_block_delta", "index": index, "delta": signature}
            frames = sse.json_frame(delta, event="content_block_delta")
        self._open = None
        stop = {"type": "content_block_stop", "index": index}
        return frames + sse.json_frame(stop, event="content_block_stop")

    @staticmethod
    def _delta(kind: str, index: int, text: str) -> bytes:
        """One ``content_block_delta`` frame of ``kind`` carrying ``text``
        (JSON-escaped, so it never breaks the single ``data:`` line)."""
        return _DELTA_HEAD + b"%d" % index + _DELTA_KINDS[kind] + encode(text) + _DELTA_TAIL
