"""Llama 3.x JSON tool calls.

A call is recognised only when the output starts (after whitespace) with an
optional ``<|python_tag|>`` and then ``{"name": "f", "parameters": {...}}``
(``arguments`` is accepted too); several calls are separated by ``;``.
Without the tag, an object counts as a call only if its first member is
``name`` naming one of the request's tools (a JSON answer is content).
Output that starts any other way is content. Text after the calls is
content, except ``<|eom_id|>``/``<|eot_id|>`` markers, which are dropped.
"""

from __future__ import annotations

import re

from worker.parsers.base import ToolCallSink, is_marker_prefix
from worker.parsers.family import ToolFamily
from worker.parsers.json_calls import CallObject
from worker.parsers.lark_rules import call_schema, json_rule, more_calls
from worker.parsers.machine import ToolTextParser

TAG = "<|python_tag|>"
_HEADER = "<|start_header_id|>"
_IPYTHON_ROLE = re.compile(r"""['"]ipython['"]|<\|start_header_id\|>ipython""")
_ENDS = ("<|eom_id|>", "<|eot_id|>")


class Llama3JsonParser(ToolTextParser):
    """Streaming parser of Llama 3 JSON tool calls (see the module)."""

    def __init__(self, sink: ToolCallSink, names: set[str] | None) -> None:
        super().__init__(sink)
        self.names = names
        self.state = "start"
        self.lead = ""
        self.tagged = False
        self.obj: CallObject | None = None

    def _new_object(self) -> None:
        """Start parsing the next call object."""
        self.obj = CallObject(
            self.sink,
            arg_keys=("parameters", "arguments"),
            strict=not self.tagged,
            names=None if self.tagged else self.names,
        )
        self.state = "json"

    def _to_text(self, raw: str) -> bool:
        """Give up on calls: ``raw`` and everything after it is content."""
        self.emit(raw)
        self.lead = ""
        self.state = "text"
        return True

    def _step(self, final: bool) -> bool:
        """Advance one state (see the module docstring)."""
        st = self.state
        if st in ("start", "after_tag"):
            stripped = self.buf.lstrip()
            if not stripped:
                if final:
                    self._to_text(self.lead + self.buf)
                    self.buf = ""
                return False
            ws = self.buf[: len(self.buf) - len(stripped)]
            if st == "start" and stripped.startswith(TAG):
                self.lead += ws + TAG
                self.buf = stripped[len(TAG) :]
                self.tagged = True
                self.state = "after_tag"
                return True
            if st == "start" and not final and is_marker_prefix(stripped, (TAG,)):
                return False
            if stripped[0] == "{":
                self.lead += ws
                self.buf = stripped
                self._new_object()
                return True
            return self._to_text(self.lead)
        if st == "json":
            assert self.obj is not None
            self.pump(self.obj.push)
            if self.obj.status == "parsing":
                return False
            if self.obj.status == "invalid" and not self.obj.committed:
                return self._to_text(self.lead + "".join(self.obj.raw))
            self.obj = None
            self.lead = ""
            self.state = "sep"
            return True
        if st == "sep":
            stripped = self.buf.lstrip()
            if stripped.startswith(";"):
                self.buf = stripped[1:]
                self.lead = ";"
                self.state = "next"
                return True
            for end in _ENDS:
                if stripped.startswith(end):
                    self.buf = stripped[len(end) :]
                    return True
            if not stripped:
                if final:
                    self.buf = ""
                return False
            if not final and is_marker_prefix(stripped, _ENDS):
                return False
            self.buf = stripped
            self.state = "text"
            return True
        if st == "next":
            stripped = self.buf.lstrip()
            if not stripped:
                if final:
                    self.buf = ""
                return False
            if stripped[0] == "{":
                self.lead += self.buf[: len(self.buf) - len(stripped)]
                self.buf = stripped
                self._new_object()
                return True
            return self._to_text(self.lead)
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
        """Input ended inside a call object: close it if named, else content."""
        if self.state == "json" and self.obj is not None and not self.obj.close():
            self.emit(self.lead + "".join(self.obj.raw) + self.buf)
        elif self.state in ("start", "after_tag"):
            self.emit(self.lead + self.buf)


def grammar(tools, *, max_calls: int, lit) -> str:
    """Lark grammar forcing 1..``max_calls`` ``;``-separated Llama 3 JSON
    calls of ``tools``."""
    rep = more_calls('"; " call', max_calls)
    return f"start: call{rep}\ncall: {json_rule(call_schema(tools, 'parameters'))}\n"


def _detect(text: str) -> bool:
    """The Llama 3 tool markup: ``<|python_tag|>`` or an ``ipython`` role."""
    return TAG in text or (_HEADER in text and bool(_IPYTHON_ROLE.search(text)))


FAMILY = ToolFamily(
    name="llama3_json",
    parser=lambda sink, tools, thinking_open: Llama3JsonParser(sink, {t.name for t in tools}),
    grammar=grammar,
    detect=_detect,
    detect_rank=70,
    vocab_markers=(TAG, _HEADER),
)
"""Llama 3 JSON's declaration (see :class:`~worker.parsers.family.ToolFamily`)."""
