"""Hermes-style tool calls (Hermes 2/3, Qwen2.5, Qwen3, mlxd's generic prompt).

Output format::

    optional content
    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>
    <tool_call>
    ...
    </tool_call>

The arguments object streams as it arrives (only prefixes that can still
be closed into valid JSON). The single newline right before ``<tool_call>``
is dropped. A block whose JSON is not a call (no name before it breaks off)
goes out as content unchanged; a block that breaks after its call was
emitted is closed with what was read and the rest of the block is dropped.
"""

from __future__ import annotations

from worker.parsers.base import ToolCallSink
from worker.parsers.family import ToolFamily
from worker.parsers.json_calls import CallObject
from worker.parsers.lark_rules import call_schema, json_rule, more_calls
from worker.parsers.machine import ToolTextParser

OPEN, CLOSE = "<tool_call>", "</tool_call>"


class HermesParser(ToolTextParser):
    """Streaming parser of ``<tool_call>{json}</tool_call>`` blocks."""

    OPENERS = (OPEN,)
    STRIP_NEWLINE = True

    def __init__(self, sink: ToolCallSink) -> None:
        super().__init__(sink)
        self.obj: CallObject | None = None
        self.raw_open = ""

    def _open(self, marker: str, raw: str) -> None:
        """Start a call block."""
        self.obj = CallObject(self.sink)
        self.raw_open = raw
        self.state = "call"

    def _step(self, final: bool) -> bool:
        """Advance one state (see the module docstring)."""
        st = self.state
        if st == "content":
            return self.content_step(final)
        if st == "call":
            assert self.obj is not None
            self.pump(self.obj.push)
            if self.obj.status == "done":
                self.state = "tail"
                return True
            if self.obj.status == "invalid":
                if self.obj.committed:
                    self.state = "drop"
                else:
                    self.broken = self.raw_open + "".join(self.obj.raw)
                    self.state = "broken"
                return True
            return False
        if st == "tail":
            return self._tail(final)
        if st == "drop":
            return self.drop_until(final, (CLOSE,), (OPEN,))
        if st == "broken":
            return self.give_back_until(final, (CLOSE,), (OPEN,))
        return False

    def _tail(self, final: bool) -> bool:
        """After a call's object: expect ``</tool_call>``; other text is content."""
        stripped = self.buf.lstrip()
        if stripped.startswith(CLOSE):
            self.buf = stripped[len(CLOSE) :]
            self.state = "content"
            return True
        if stripped and not CLOSE.startswith(stripped):
            self.buf = stripped
            self.state = "content"
            return True
        if final:
            self.buf = ""
        return False

    def _end(self) -> None:
        """Input ended inside a block: close a named call, else give the
        block back as content."""
        if self.state == "call" and self.obj is not None:
            if not self.obj.close():
                self.emit(self.raw_open + "".join(self.obj.raw) + self.buf)
        elif self.state == "broken":
            self.emit(self.broken + self.buf)
        self.broken = ""


def grammar(tools, *, max_calls: int, lit) -> str:
    """Lark grammar forcing 1..``max_calls`` Hermes call blocks of
    ``tools``; ``lit`` renders a marker."""
    rep = more_calls('"\\n" call', max_calls)
    return f'start: call{rep}\ncall: {lit(OPEN)} "\\n" body "\\n" {lit(CLOSE)}\nbody: {json_rule(call_schema(tools))}\n'


FAMILY = ToolFamily(
    name="hermes",
    parser=lambda sink, tools, thinking_open: HermesParser(sink),
    grammar=grammar,
    grammar_markers=(OPEN, CLOSE),
    detect=lambda text: OPEN in text,
    detect_rank=30,
    vocab_markers=(OPEN,),
)
"""Hermes' declaration (see :class:`~worker.parsers.family.ToolFamily`)."""
