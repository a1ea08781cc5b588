"""The builder of an Anthropic Messages answer (streamed or whole).

:class:`MessageBuilder` is the :class:`~gateway.frontend.answer_driver.AnswerBuilder`
of ``POST /v1/messages`` (always one choice): driven by
:class:`~gateway.frontend.answer_driver.AnswerRun` it returns the SSE frames of the
stream, every frame with its ``event:`` line, and collects the turn so that
:meth:`MessageBuilder.body` is the non-streamed ``message``.

Stream: ``message_start`` (with the usage known from the first output) and
``ping``; then ``content_block_start`` / ``content_block_delta`` /
``content_block_stop`` as the kind of output changes (reasoning, text, tool
call k; a thinking block gets an empty ``signature_delta`` before it
stops); then ``message_delta`` (stop reason, cumulative usage) and
``message_stop``. A request that fails midway ends with whatever its last
output carried and an ``event: error`` frame. The whole message holds at
most one thinking block, then one text block, then the tool calls by
index. Tool calls are assembled by
:class:`~gateway.frontend.tool_calls.ToolCallAssembler` with ``toolu_`` ids.
Shapes, stop reasons and usage come from :mod:`gateway.anthropic.format`.

Event loop only; one builder per request.
"""

from __future__ import annotations

import logging
from typing import Any

from gateway.anthropic.format import (
    ContentBlock,
    TextContent,
    ThinkingContent,
    ToolUseContent,
    delta_usage_of,
    encode,
    new_message,
    stop_reason,
    tool_input,
    usage_of,
)
from gateway.core.errors import worker_error
from gateway.frontend import sse
from gateway.frontend.answer_driver import TokenTally
from gateway.frontend.error_shapes import anthropic_error_frame
from gateway.frontend.tool_calls import ANTHROPIC_CALL_IDS, ToolCallAssembler
from shared.protocol import RequestOutput, ToolCallDelta

log = logging.getLogger("mlxd.gateway.anthropic")

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


class MessageBuilder:
    """Builds one ``message``: its stream frames and its whole body.

    ``message_id`` and ``model`` name it; ``omit_thinking``: the thinking
    block carries no text (``thinking.display: "omitted"``: no
    ``thinking_delta`` either); ``applied_edits`` (None: the request had no
    context management) become the message's ``context_management`` (in
    ``message_start``, ``message_delta`` and the whole message).
    """

    choices = 1

    def __init__(
        self,
        message_id: str,
        model: str,
        omit_thinking: bool = False,
        applied_edits: list[dict[str, Any]] | None = None,
    ) -> None:
        self.message_id = message_id
        self.model = model
        self.tally = TokenTally()
        self._omit_thinking = omit_thinking
        self._applied_edits = applied_edits
        self._reasoning: list[str] = []
        self._text: list[str] = []
        self._calls = ToolCallAssembler(ANTHROPIC_CALL_IDS)
        self._finish: RequestOutput | None = None
        self._open: BlockKey | None = None
        self._open_index = -1
        self._blocks = 0
        self._tool_blocks: dict[int, int] = {}

    # --- the AnswerBuilder contract ------------------------------------------------------

    def start(self, first: RequestOutput) -> bytes:
        """``message_start`` (usage from ``first``) and a ``ping``."""
        self.tally.add(first)
        message = new_message(self._applied_edits, id=self.message_id, model=self.model, content=[], usage=self.usage())
        return sse.json_frame({"type": "message_start", "message": message}, event="message_start") + (
            sse.json_frame({"type": "ping"}, event="ping")
        )

    def add(self, output: RequestOutput) -> bytes:
        """Collect ``output`` and return the frames of its reasoning, text
        and tool-call pieces, in that order."""
        if output.ends_choice:
            self._finish = output
        return self._content(output)

    def finish(self) -> bytes:
        """Close the open block, then ``message_delta`` and ``message_stop``."""
        reason, sequence = self._stop()
        delta: dict[str, Any] = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence, "stop_details": None, "container": None},
            "usage": delta_usage_of(self.tally),
        }
        if self._applied_edits is not None:
            delta["context_management"] = {"applied_edits": self._applied_edits}
        return (
            self._close()
            + sse.json_frame(delta, event="message_delta")
            + sse.json_frame({"type": "message_stop"}, event="message_stop")
        )

    def fail(self, output: RequestOutput) -> bytes:
        """Whatever the failing ``output`` still carries, then the ``event:
        error`` frame (status mapped as for non-streamed errors)."""
        content = self._content(output) if output.index == 0 else b""
        return content + anthropic_error_frame(worker_error(output))

    def frames(self, batch: bytes) -> bytes:
        """The frames are already bytes."""
        return batch

    # --- the whole message ---------------------------------------------------------------

    def usage(self) -> Any:
        """The message's ``usage`` so far."""
        return usage_of(self.tally)

    def content(self) -> list[ContentBlock]:
        """The content blocks: thinking, text, then the tool calls by index.

        Raises:
            APIError: 500 as :func:`~gateway.anthropic.format.tool_input`.
        """
        blocks: list[ContentBlock] = []
        if self._reasoning:
            blocks.append(ThinkingContent(thinking="" if self._omit_thinking else "".join(self._reasoning)))
        if self._text:
            blocks.append(TextContent(text="".join(self._text)))
        for call in sorted(self._calls.calls(), key=lambda c: c.index):
            blocks.append(ToolUseContent(id=call.id or "", name=call.name, input=tool_input(call.arguments)))
        return blocks

    def body(self) -> bytes:
        """The JSON of the finished ``message``.

        Raises:
            APIError: 500 as :func:`~gateway.anthropic.format.tool_input`.
        """
        reason, sequence = self._stop()
        message = new_message(
            self._applied_edits,
            id=self.message_id,
            model=self.model,
            content=self.content(),
            stop_reason=reason,
            stop_sequence=sequence,
            usage=self.usage(),
        )
        return encode(message)

    def _stop(self) -> tuple[str, str | None]:
        """``(stop_reason, stop_sequence)`` of the finished turn."""
        finish = self._finish
        return stop_reason(finish.finish_reason, finish.stop_sequence) if finish else ("end_turn", None)

    # --- stream frames ---------------------------------------------------------------------

    def _content(self, output: RequestOutput) -> bytes:
        """Collect ``output``'s content; its frames."""
        self.tally.add(output)
        frames = b""
        if output.reasoning:
            self._reasoning.append(output.reasoning)
            frames += self._enter(("thinking", 0), {"type": "thinking", "thinking": "", "signature": ""})
            if not self._omit_thinking:
                frames += self._delta("thinking", self._open_index, output.reasoning)
        if output.text:
            self._text.append(output.text)
            frames += self._enter(("text", 0), {"type": "text", "text": "", "citations": None})
            frames += self._delta("text", self._open_index, output.text)
        for piece in output.tool_calls or ():
            frames += self._tool_piece(piece)
        return frames

    def _tool_piece(self, piece: ToolCallDelta) -> bytes:
        """Frames for one piece of tool call ``piece.index``: a new call
        closes the open block and starts a ``tool_use`` block; arguments
        become ``input_json_delta`` fragments."""
        call, started = self._calls.add(piece)
        frames = b""
        if started:
            start = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
            frames = self._enter(("tool", piece.index), start)
            self._tool_blocks[piece.index] = self._open_index
        elif self._open != ("tool", piece.index):
            log.error("tool call %d continued after a later block started", piece.index)
        if piece.arguments:
            frames += self._delta("tool", self._tool_blocks[piece.index], piece.arguments)
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
