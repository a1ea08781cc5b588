"""The generic JSON tool-call format (fallback for models without markup).

The whole output (after leading whitespace, optionally inside a
```` ```json ```` fence) is one call object ``{"name": "f", "arguments":
{...}}`` or a JSON array of them. Because a JSON object may just as well be
an ordinary answer, an object counts as a call only if its first member is
``name`` naming one of the request's tools; anything else is content. Output
that does not start with ``{``, ``[`` or a fence streams as content at once;
output that does is held until it is clear whether it is a call. Text after
the call(s) (and the closing fence, which is dropped) is content.
"""

from __future__ import annotations

import re

from worker.parsers.base import ToolCallSink
from worker.parsers.family import ToolFamily
from worker.parsers.json_calls import CallList, CallObject
from worker.parsers.lark_rules import call_schema, json_rule
from worker.parsers.machine import ToolTextParser

_FENCE = re.compile(r"```(?:json|JSON)?[ \t]*\n")
_FENCE_START = re.compile(r"`{1,2}|```(?:[jJ](?:[sS](?:[oO][nN]?)?)?)?[ \t]*")


class JsonToolParser(ToolTextParser):
    """Streaming parser of a whole-output JSON tool call (see the module):
    reads an optional fence; the call object or array is the machine's
    ``json`` state, text after it its ``text`` state."""

    HEAD_STATES = ("start",)

    def __init__(self, sink: ToolCallSink, names: set[str] | None) -> None:
        super().__init__(sink)
        self.names = names
        self.state = "start"
        self.fenced = False

    def _not_a_call(self, text: str) -> bool:
        """Not a call after all: everything read so far is content."""
        return self.give_back(text, "text")

    def _json_ended(self, complete: bool) -> None:
        """The call(s) were read: a closing fence may follow."""
        self.state = "fence_end" if self.fenced else "text"

    def _state_start(self, final: bool) -> bool:
        """Look at the first non-space character and pick a state."""
        stripped = self.buf.lstrip()
        if not stripped:
            if final:
                self.emit(self.raw + self.buf)
                self.raw = self.buf = ""
            return False
        c = stripped[0]
        if c == "`" and not self.fenced:
            m = _FENCE.match(stripped)
            if m:
                self.raw += self.buf[: len(self.buf) - len(stripped)] + m.group(0)
                self.buf = stripped[m.end() :]
                self.fenced = True
                return True
            if not final and _FENCE_START.fullmatch(stripped):
                return False
        elif c in "{[":
            self.raw += self.buf[: len(self.buf) - len(stripped)]
            self.buf = stripped
            kw = {"strict": True, "names": self.names}
            self.obj = CallObject(self.sink, **kw) if c == "{" else CallList(self.sink, **kw)
            self.state = "json"
            return True
        return self.give_back(self.raw, "text")

    def _state_fence_end(self, final: bool) -> bool:
        """After fenced calls: drop the closing fence."""
        return self.skip_marker(final, "```", "text")


def grammar(tools, *, max_calls: int, lit) -> str:
    """Lark grammar forcing a JSON call object of ``tools`` (or, if
    ``max_calls`` > 1, either one object or a JSON array of 1..``max_calls``
    of them)."""
    one = call_schema(tools)
    array = {"type": "array", "items": one, "minItems": 1, "maxItems": max_calls}
    schema = {"anyOf": [one, array]} if max_calls > 1 else one
    return f"start: {json_rule(schema)}\n"


FAMILY = ToolFamily(
    name="json",
    parser=lambda sink, tools, thinking_open: JsonToolParser(sink, {t.name for t in tools}),
    grammar=grammar,
)
"""The generic JSON format's declaration (never detected; see
:class:`~worker.parsers.family.ToolFamily`)."""
