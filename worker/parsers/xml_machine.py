"""The parser machine of the families that write arguments as tagged
key/value pairs (``qwen3_coder``, ``glm45``).

:class:`XmlCall` builds a call's arguments object member by member;
:class:`XmlToolParser` adds to :class:`~worker.parsers.machine.ToolTextParser`
the states these families share: ``members`` (between arguments: the next
key tag, or a tag that ends the call), ``key`` (an argument's name up to
:attr:`~XmlToolParser.KEY_END`) and ``value`` (an argument's text up to the
first of :attr:`~XmlToolParser.VALUE_ENDS`). A family module supplies the
markers and the states that read the function name.
"""

from __future__ import annotations

import json
from typing import Any

from worker.parsers.base import ToolCallSink, is_marker_prefix
from worker.parsers.machine import ToolTextParser
from worker.parsers.schema_values import coerce_value, tool_params


class XmlCall:
    """One call whose arguments arrive as separate ``key``/text pairs.

    Opening sends the name and ``{``; :meth:`member` types a value by the
    parameter's schema (``props`` maps parameter names to schemas) and sends
    ``"key": value``; :meth:`close` sends ``}`` and closes the call, so the
    fragments always concatenate to one JSON object.
    """

    def __init__(self, sink: ToolCallSink, name: str, props: dict[str, Any]) -> None:
        self.sink = sink
        self.props = props
        self.count = 0
        self.index = sink.open(name, "{")

    def member(self, key: str, text: str) -> None:
        """Send one parameter."""
        value = coerce_value(text, self.props.get(key))
        sep = ", " if self.count else ""
        self.count += 1
        self.sink.append(
            self.index,
            f"{sep}{json.dumps(key, ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}",
        )

    def close(self) -> None:
        """Send the closing brace and close the call."""
        self.sink.append(self.index, "}")
        self.sink.close(self.index)


class XmlToolParser(ToolTextParser):
    """Base of the tagged key/value families (see the module docstring).

    Subclasses set :attr:`MEMBER_TAGS` (``(marker, next state, closes the
    call)`` for each tag that may follow an argument, the argument's key
    tag first), :attr:`KEY_END`, :attr:`AFTER_KEY` (the state that reads up
    to the value) and :attr:`VALUE_ENDS` (the value's own closing tag first;
    the others end a value whose closing tag is missing and are left in the
    buffer), and call :meth:`start_call` once the function name is read.
    ``tools`` are the request's tools: each value is typed by its
    parameter's schema.
    """

    STRIP_NEWLINE = True
    MEMBER_TAGS: tuple[tuple[str, str, bool], ...] = ()
    KEY_END = ">"
    AFTER_KEY = "value"
    VALUE_ENDS: tuple[str, ...] = ()

    def __init__(self, sink: ToolCallSink, tools) -> None:
        super().__init__(sink)
        self.params = tool_params(tools)
        self.call: XmlCall | None = None
        self.key = ""

    def start_call(self, name: str) -> bool:
        """The function name is known: open the call and read its arguments; True."""
        self.call = XmlCall(self.sink, name, self.params.get(name, {}))
        self.raw = ""
        self.state = "members"
        return True

    def _state_members(self, final: bool) -> bool:
        """Between arguments: the next tag; text that is no tag is skipped
        up to the next ``<``."""
        stripped = self.buf.lstrip()
        assert self.call is not None
        for marker, then, closes in self.MEMBER_TAGS:
            if stripped.startswith(marker):
                self.buf = stripped[len(marker) :]
                if closes:
                    self._close_call()
                self.state = then
                return True
        if not stripped or is_marker_prefix(stripped, tuple(tag[0] for tag in self.MEMBER_TAGS)):
            return False
        j = stripped.find("<", 1)
        self.buf = stripped[j:] if j >= 0 else ""
        return j >= 0

    def _state_key(self, final: bool) -> bool:
        """An argument's name, up to :attr:`KEY_END`."""
        i = self.buf.find(self.KEY_END)
        if i < 0:
            return False
        self.key = self.buf[:i].strip()
        self.buf = self.buf[i + len(self.KEY_END) :]
        self.state = self.AFTER_KEY
        return True

    def _state_value(self, final: bool) -> bool:
        """An argument's value, up to the first of :attr:`VALUE_ENDS`."""
        i, m = self.find_end(self.VALUE_ENDS)
        if i < 0:
            return False
        self._member(self.buf[:i])
        self.buf = self.buf[i + len(m) :] if m == self.VALUE_ENDS[0] else self.buf[i:]
        self.state = "members"
        return True

    def _member(self, text: str) -> None:
        """Send the argument :attr:`key` with the value ``text``."""
        assert self.call is not None
        self.call.member(self.key, text)

    def _close_call(self) -> None:
        """Close the current call."""
        assert self.call is not None
        self.call.close()
        self.call = None

    def _end(self) -> None:
        """Input ended: finish an open call (with a value being read), else
        as the machine does."""
        if self.call is not None:
            if self.state == "value":
                self._member(self.buf)
            self._close_call()
        else:
            super()._end()
