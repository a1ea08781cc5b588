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

from worker.parsers.family import ToolFamily
from worker.parsers.json_calls import CallObject
from worker.parsers.lark_rules import call_schema, json_rule, more_calls
from worker.parsers.machine import ToolTextParser

OPEN, CLOSE = "<tool_call>", "</tool_call>"


class HermesParser(ToolTextParser):
    """Streaming parser of ``<tool_call>{json}</tool_call>`` blocks: the
    machine's ``json`` state reads the call object, then ``tail`` expects
    the closing tag (see :mod:`worker.parsers.machine`)."""

    OPENERS = (OPEN,)
    STRIP_NEWLINE = True
    CLOSERS = (CLOSE,)

    def _open(self, marker: str, raw: str) -> None:
        """Start a call block."""
        self.obj = CallObject(self.sink)
        self.raw = raw
        self.state = "json"

    def _json_ended(self, complete: bool) -> None:
        """Expect ``</tool_call>``; a call that broke off drops the rest of its block."""
        self.state = "tail" if complete else "drop"

    def _not_a_call(self, text: str) -> bool:
        """The block is not a call: it goes back to content up to its end."""
        return self.give_back_block(text)

    def _state_tail(self, final: bool) -> bool:
        """After a call's object: expect ``</tool_call>``; other text is content."""
        return self.skip_marker(final, CLOSE, "content")


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
