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
    """Streaming parser of Llama 3 JSON tool calls (see the module): reads
    the tag and the ``;`` separators; each call object is the machine's
    ``json`` state, text after the calls its ``text`` state."""

    HEAD_STATES = ("start", "after_tag")

    def __init__(self, sink: ToolCallSink, names: set[str] | None) -> None:
        super().__init__(sink)
        self.names = names
        self.state = "start"
        self.tagged = False

    def _new_object(self) -> None:
        """Start parsing the next call object."""
        self.obj = CallObject(
            self.sink,
            arg_keys=("parameters", "arguments"),
            strict=not self.tagged,
            names=None if self.tagged else self.names,
        )
        self.state = "json"

    def _not_a_call(self, text: str) -> bool:
        """Give up on calls: ``text`` and everything after it is content."""
        return self.give_back(text, "text")

    def _json_ended(self, complete: bool) -> None:
        """A call was read: a ``;`` may start another."""
        self.state = "sep"

    def _state_start(self, final: bool) -> bool:
        """The output's start: an optional tag, then a call object."""
        return self._lead(final, tag_allowed=True)

    def _state_after_tag(self, final: bool) -> bool:
        """After ``<|python_tag|>``: a call object."""
        return self._lead(final, tag_allowed=False)

    def _lead(self, final: bool, tag_allowed: bool) -> bool:
        """Skip whitespace (kept in :attr:`raw`) to the tag or the first object."""
        stripped = self.buf.lstrip()
        if not stripped:
            if final:
                self.give_back(self.raw + self.buf, "text")
                self.buf = ""
            return False
        ws = self.buf[: len(self.buf) - len(stripped)]
        if tag_allowed and stripped.startswith(TAG):
            self.raw += ws + TAG
            self.buf = stripped[len(TAG) :]
            self.tagged = True
            self.state = "after_tag"
            return True
        if tag_allowed and not final and is_marker_prefix(stripped, (TAG,)):
            return False
        if stripped[0] == "{":
            self.raw += ws
            self.buf = stripped
            self._new_object()
            return True
        return self.give_back(self.raw, "text")

    def _state_sep(self, final: bool) -> bool:
        """After a call: ``;`` and another call, end markers (dropped), or text."""
        stripped = self.buf.lstrip()
        if stripped.startswith(";"):
            self.buf = stripped[1:]
            self.raw = ";"
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

    def _state_next(self, final: bool) -> bool:
        """After ``;``: the next call object, else the rest is content."""
        stripped = self.buf.lstrip()
        if not stripped:
            if final:
                self.buf = ""
            return False
        if stripped[0] == "{":
            self.raw += self.buf[: len(self.buf) - len(stripped)]
            self.buf = stripped
            self._new_object()
            return True
        return self.give_back(self.raw, "text")


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
