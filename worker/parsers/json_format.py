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
    """Streaming parser of a whole-output JSON tool call (see the module)."""

    def __init__(self, sink: ToolCallSink, names: set[str] | None) -> None:
        super().__init__(sink)
        self.names = names
        self.state = "start"
        self.lead = ""
        self.fenced = False
        self.parser: CallObject | CallList | None = None

    def _fallback(self) -> None:
        """Not a call after all: everything read so far is content."""
        raw = "".join(self.parser.raw) if self.parser is not None else ""
        self.emit(self.lead + raw)
        self.lead = ""
        self.parser = None
        self.state = "text"

    def _begin(self, final: bool) -> bool:
        """Look at the first non-space character and pick a state."""
        stripped = self.buf.lstrip()
        if not stripped:
            if final:
                self.emit(self.lead + self.buf)
                self.lead = self.buf = ""
            return False
        c = stripped[0]
        if c == "`" and not self.fenced:
            m = _FENCE.match(stripped)
            if m:
                self.lead += self.buf[: len(self.buf) - len(stripped)] + m.group(0)
                self.buf = stripped[m.end() :]
                self.fenced = True
                return True
            if not final and _FENCE_START.fullmatch(stripped):
                return False
        elif c in "{[":
            self.lead += self.buf[: len(self.buf) - len(stripped)]
            self.buf = stripped
            kw = {"strict": True, "names": self.names}
            self.parser = CallObject(self.sink, **kw) if c == "{" else CallList(self.sink, **kw)
            self.state = "json"
            return True
        self.emit(self.lead)
        self.lead = ""
        self.state = "text"
        return True

    def _step(self, final: bool) -> bool:
        """Advance one state (see the module docstring)."""
        st = self.state
        if st == "start":
            return self._begin(final)
        if st == "json":
            assert self.parser is not None
            self.pump(self.parser.push)
            status = self.parser.status
            if status == "parsing":
                return False
            if status == "invalid" and not self.parser.committed:
                self._fallback()
                return True
            self.parser = None
            self.lead = ""
            self.state = "fence_end" if self.fenced else "text"
            return True
        if st == "fence_end":
            stripped = self.buf.lstrip()
            if stripped.startswith("```"):
                self.buf = stripped[3:]
                self.state = "text"
                return True
            if stripped and not "```".startswith(stripped):
                self.buf = stripped
                self.state = "text"
                return True
            if final:
                self.buf = ""
            return False
        if st == "text":
            if self.sink.saw and not self.buf.strip():
                # whitespace after the calls: held, and dropped at the end
                if final:
                    self.buf = ""
                return False
            self.emit(self.buf)
            self.buf = ""
            return False
        return False

    def _end(self) -> None:
        """Input ended inside the JSON: close a named call, else content."""
        if self.state == "json" and self.parser is not None:
            if not self.parser.close():
                self._fallback()
                self.emit(self.buf)
        elif self.state == "start":
            self.emit(self.lead + self.buf)


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
