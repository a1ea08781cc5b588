"""Incremental JSON scanning for streaming tool-call arguments.

:class:`JsonScanner` reads one JSON value a character at a time and always
knows (a) whether the value is complete, (b) whether the text is still a
valid JSON prefix and (c) the longest prefix that can be completed by only
appending closing characters (``"``, ``}``, ``]``) — the *safe* prefix.
Streaming only safe prefixes means an argument stream cut off at any point
can still be closed into valid JSON, so nothing sent to a client has to be
taken back.

:class:`ArgStream` streams one arguments object into a
:class:`~worker.parsers.base.ToolCallSink`; :class:`CallObject` parses a
whole ``{"name": ..., "arguments": {...}}`` call object (the JSON families);
:class:`CallList` a JSON array of them.

Raw control characters inside strings (invalid JSON, but models write raw
newlines) are escaped in the scanned text, so emitted arguments always parse.
"""

from __future__ import annotations

import json
import re
from typing import Any

from worker.parsers.base import ToolCallSink

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?\Z")
_NUM_CHARS = frozenset("0123456789+-.eE")
_LITERALS = ("true", "false", "null")
_WS = " \t\r\n"
_ESCAPES = frozenset('"\\/bfnrt')
_HEX = frozenset("0123456789abcdefABCDEF")

# what the scanner expects next at the current nesting level
_VALUE, _KEY_OR_CLOSE, _VALUE_OR_CLOSE, _KEY, _COLON, _COMMA_OR_CLOSE = range(6)


class JsonScanner:
    """Scans one JSON value incrementally (leading whitespace is the caller's).

    :meth:`push` takes one character and returns False when the character
    is not part of the value (the value had already ended, or the text is
    invalid: then :attr:`error` is set). :attr:`done` is set when the value
    is complete; a top-level number or literal completes only when a
    following character (or :meth:`end`) shows it ended. :attr:`parts` is the
    scanned text (one entry per character, control characters in strings
    escaped); ``parts[:safe]`` can be closed by appending :attr:`closer`.
    """

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.stack: list[str] = []
        self.expect = _VALUE
        self.in_string = False
        self.key_string = False
        self.escape = 0  # 0 none, -1 after backslash, n>0: n hex digits left
        self.atom = ""
        self.done = False
        self.error = False
        self.safe = 0
        self.closer = ""

    @property
    def text(self) -> str:
        """The scanned text so far."""
        return "".join(self.parts)

    @property
    def started(self) -> bool:
        """True once the value's first character was read."""
        return bool(self.parts)

    def push(self, ch: str) -> bool:
        """Read ``ch``; False when it does not belong to this value."""
        if self.done or self.error:
            return False
        if self.in_string:
            self._string_char(ch)
        elif self.atom:
            if ch.isalpha() if self.atom[0] in "tfn" else ch in _NUM_CHARS:
                self.atom += ch
                self.parts.append(ch)
            else:
                if not self._end_atom():
                    return False
                if self.done:
                    return False
                return self.push(ch)
        elif ch in _WS:
            if not self.stack:
                # whitespace before a top-level value is the caller's business
                self.error = True
                return False
            self.parts.append(ch)
        elif not self._structural(ch):
            self.error = True
            return False
        self._update_safe()
        return True

    def end(self) -> bool:
        """The input ended: complete a pending top-level number or literal.
        Returns :attr:`done`."""
        if self.atom and not self.stack and not self.error:
            self._end_atom()
        return self.done

    def _string_char(self, ch: str) -> None:
        """Read one character inside a string."""
        if self.escape == -1:
            if ch == "u":
                self.escape = 4
            elif ch in _ESCAPES:
                self.escape = 0
            else:
                self.error = True
                return
            self.parts.append(ch)
            return
        if self.escape > 0:
            if ch not in _HEX:
                self.error = True
                return
            self.escape -= 1
            self.parts.append(ch)
            return
        if ch == "\\":
            self.escape = -1
            self.parts.append(ch)
        elif ch == '"':
            self.parts.append(ch)
            self.in_string = False
            if self.key_string:
                self.expect = _COLON
            else:
                self._value_done()
        elif ord(ch) < 0x20:
            self.parts.append(json.dumps(ch)[1:-1])
        else:
            self.parts.append(ch)

    def _end_atom(self) -> bool:
        """Finish the number or literal being read; False if it is invalid."""
        atom, self.atom = self.atom, ""
        if atom in _LITERALS or _NUMBER.match(atom):
            self._value_done()
            self._update_safe()
            return True
        self.error = True
        return False

    def _structural(self, ch: str) -> bool:
        """Read a character outside strings and atoms; False if unexpected."""
        e = self.expect
        if ch in "{[":
            if e not in (_VALUE, _VALUE_OR_CLOSE):
                return False
            self.stack.append(ch)
            self.expect = _KEY_OR_CLOSE if ch == "{" else _VALUE_OR_CLOSE
        elif ch == "}" or ch == "]":
            want = "{" if ch == "}" else "["
            if not self.stack or self.stack[-1] != want:
                return False
            if e not in (_COMMA_OR_CLOSE, _KEY_OR_CLOSE if ch == "}" else _VALUE_OR_CLOSE):
                return False
            self.stack.pop()
            self.parts.append(ch)
            self._value_done()
            return True
        elif ch == ",":
            if e != _COMMA_OR_CLOSE:
                return False
            self.expect = _KEY if self.stack[-1] == "{" else _VALUE
        elif ch == ":":
            if e != _COLON:
                return False
            self.expect = _VALUE
        elif ch == '"':
            if e in (_KEY_OR_CLOSE, _KEY):
                self.key_string = True
            elif e in (_VALUE, _VALUE_OR_CLOSE):
                self.key_string = False
            else:
                return False
            self.in_string = True
        elif ch == "-" or ch.isdigit() or ch in "tfn":
            if e not in (_VALUE, _VALUE_OR_CLOSE):
                return False
            self.atom = ch
        else:
            return False
        self.parts.append(ch)
        return True

    def _value_done(self) -> None:
        """A value just ended at the current level."""
        if self.stack:
            self.expect = _COMMA_OR_CLOSE
        else:
            self.done = True

    def _update_safe(self) -> None:
        """Record the current length as safe when the text can be closed."""
        if self.error:
            return
        if self.done:
            self.safe, self.closer = len(self.parts), ""
            return
        if self.in_string:
            ok = not self.key_string and self.escape == 0
        elif self.atom:
            ok = bool(_NUMBER.match(self.atom)) or self.atom in _LITERALS
        else:
            ok = self.expect in (_KEY_OR_CLOSE, _VALUE_OR_CLOSE, _COMMA_OR_CLOSE)
        if ok and self.stack:
            self.safe = len(self.parts)
            self.closer = ('"' if self.in_string else "") + "".join(
                "}" if c == "{" else "]" for c in reversed(self.stack)
            )


def arguments_text(value: Any) -> str:
    """Arguments given as something other than a streamed object, as JSON
    object text: a JSON-encoded string is decoded, null becomes ``{}``; a
    value that is still not an object is rejected with ValueError."""
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else {}
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise ValueError("tool-call arguments are not a JSON object")
    return json.dumps(value, ensure_ascii=False)


class ArgStream:
    """Streams one call's arguments object into ``sink`` as it is scanned.

    Leading whitespace is skipped. An object is streamed in safe prefixes; a
    string, null or other value is buffered and converted at its end
    (:func:`arguments_text`). :meth:`push` returns False for a character
    that does not belong to the value (value complete, or invalid text: see
    :attr:`error`). :meth:`close` completes the arguments (closing a cut-off
    object, or ``{}`` if nothing usable was read) and closes the call.
    """

    def __init__(self, sink: ToolCallSink, index: int) -> None:
        self.sink = sink
        self.index = index
        self.scan = JsonScanner()
        self.emitted = 0
        self.closed = False

    @property
    def done(self) -> bool:
        """True when the arguments value is complete."""
        return self.scan.done

    @property
    def error(self) -> bool:
        """True when the arguments text is not valid JSON."""
        return self.scan.error

    def push(self, ch: str) -> bool:
        """Read one character; False if it is not part of the arguments."""
        if not self.scan.started and ch in " \t\r\n":
            return True
        ok = self.scan.push(ch)
        self._flush()
        return ok

    def _flush(self) -> None:
        """Send the newly safe part of a streamed object."""
        s = self.scan
        if s.parts and s.parts[0] == "{" and s.safe > self.emitted:
            self.sink.append(self.index, "".join(s.parts[self.emitted : s.safe]))
            self.emitted = s.safe

    def close(self) -> None:
        """Complete the arguments with what was read and close the call."""
        if self.closed:
            return
        self.closed = True
        s = self.scan
        s.end()
        self._flush()
        if s.parts and s.parts[0] == "{":
            if self.emitted == 0:
                self.sink.append(self.index, "{}")
            elif not s.done:
                self.sink.append(self.index, s.closer if s.safe else "}")
        else:
            try:
                text = arguments_text(json.loads(s.text)) if s.done else "{}"
            except ValueError:
                text = "{}"
            self.sink.append(self.index, text)
        self.sink.close(self.index)


class CallObject:
    """Parses one ``{"name": "f", "arguments": {...}}`` object incrementally.

    ``arg_keys`` name the arguments member (``arguments``/``parameters``).
    The call is opened in ``sink`` as soon as its name is known and its
    arguments stream as they arrive (arguments that come before the name
    are buffered). With ``strict`` (families where a JSON object may just as
    well be ordinary content), the first member must be ``name`` and, when
    ``names`` is given, be one of them; otherwise :attr:`status` becomes
    ``invalid`` before anything was emitted.

    :meth:`push` returns False for a character it does not consume: after
    the closing ``}``, or on invalid text (status ``invalid``; the caller
    re-reads that character). :attr:`committed` tells whether any piece of
    the call was emitted; :attr:`raw` is all text consumed (for turning an
    uncommitted object back into content). :meth:`close` completes a
    committed call; it returns False for an uncommitted one.
    """

    def __init__(
        self,
        sink: ToolCallSink,
        *,
        arg_keys: tuple[str, ...] = ("arguments", "parameters"),
        strict: bool = False,
        names: set[str] | None = None,
    ) -> None:
        self.sink = sink
        self.arg_keys = arg_keys
        self.strict = strict
        self.names = names
        self.raw: list[str] = []
        self.status = "parsing"  # parsing | done | invalid
        self.state = "open"
        self.members = 0
        self.key = ""
        self.scan: JsonScanner | None = None
        self.name: str | None = None
        self.index = -1
        self.args: ArgStream | None = None
        self.args_done = False
        self.buffered_args: str | None = None

    @property
    def committed(self) -> bool:
        """True once the call was opened in the sink."""
        return self.index >= 0

    def push(self, ch: str) -> bool:
        """Read one character; False when it is not consumed."""
        if self.status != "parsing":
            return False
        ok = self._step(ch)
        if ok:
            self.raw.append(ch)
        return ok

    def _invalid(self) -> bool:
        """Mark the object invalid; a committed call is closed as it is."""
        self.status = "invalid"
        if self.committed:
            self._finish_call()
        return False

    def _step(self, ch: str) -> bool:
        """The state machine; returns whether ``ch`` was consumed."""
        st = self.state
        if st in ("open", "key_or_end", "key", "colon", "value", "after") and ch in _WS:
            return True
        if st == "open":
            if ch != "{":
                return self._invalid()
            self.state = "key_or_end"
            return True
        if st in ("key_or_end", "key"):
            if ch == "}" and st == "key_or_end":
                return self._end_object()
            if ch != '"':
                return self._invalid()
            self.scan = JsonScanner()
            self.scan.push(ch)
            self.state = "in_key"
            return True
        if st == "in_key":
            assert self.scan is not None
            if not self.scan.push(ch):
                return self._invalid()
            if self.scan.done:
                self.key = json.loads(self.scan.text)
                if self.strict and self.members == 0 and self.key != "name":
                    return self._invalid()
                self.state = "colon"
            return True
        if st == "colon":
            if ch != ":":
                return self._invalid()
            self.state = "value"
            return True
        if st == "value":
            self.state = "in_value"
            if self.key in self.arg_keys and self.committed and self.args is None:
                self.args = ArgStream(self.sink, self.index)
            else:
                self.scan = JsonScanner()
            return self._value_char(ch)
        if st == "in_value":
            return self._value_char(ch)
        if st == "after":
            if ch == ",":
                self.state = "key"
                return True
            if ch == "}":
                return self._end_object()
            return self._invalid()
        return False

    def _value_char(self, ch: str) -> bool:
        """Read one character of a member value."""
        if self.args is not None and not self.args_done and self.key in self.arg_keys:
            consumed = self.args.push(ch)
            if self.args.error:
                return self._invalid()
            if self.args.done:
                self.args_done = True
                self._member_done()
            if not consumed:
                return self._step(ch)
            return True
        assert self.scan is not None
        consumed = self.scan.push(ch)
        if self.scan.error:
            return self._invalid()
        if self.scan.done:
            if not self._member_value(self.scan.text):
                return False
        if not consumed:
            return self._step(ch)
        return True

    def _member_done(self) -> None:
        """A member was read; expect a comma or the end."""
        self.members += 1
        self.state = "after"

    def _member_value(self, text: str) -> bool:
        """A buffered member value is complete; False if that made the
        object invalid."""
        self._member_done()
        if self.key == "name":
            name = json.loads(text)
            if not isinstance(name, str) or not name:
                return self._invalid()
            if self.strict and self.names is not None and name not in self.names:
                return self._invalid()
            if self.name is None:
                self.name = name
                self.index = self.sink.open(name)
                if self.buffered_args is not None:
                    self.sink.append(self.index, self.buffered_args)
                    self.args_done = True
        elif self.key in self.arg_keys and not self.args_done:
            try:
                converted = arguments_text(json.loads(text))
            except ValueError:
                return self._invalid()
            if self.committed:
                self.sink.append(self.index, converted)
                self.args_done = True
            else:
                self.buffered_args = converted
        return True

    def _end_object(self) -> bool:
        """The closing brace: finish the call (or reject a nameless object)."""
        if not self.committed:
            return self._invalid()
        self._finish_call()
        self.status = "done"
        return True

    def _finish_call(self) -> None:
        """Complete the arguments if needed and close the call."""
        if self.args is not None:
            if not self.args.closed:
                self.args.close()
            return
        if not self.args_done:
            self.sink.append(self.index, "{}")
            self.args_done = True
        self.sink.close(self.index)

    def close(self) -> bool:
        """End of input inside the object: complete a committed call.
        Returns whether the call was committed."""
        if self.status == "parsing" and self.committed:
            self.status = "done"
            self._finish_call()
        return self.committed


class CallList:
    """Parses a JSON array of call objects, ``[{...}, {...}]``, from its ``[``.

    Each element is a :class:`CallObject` (same ``strict``/``names`` rules).
    :attr:`status` is ``parsing``, ``done`` (after ``]``) or ``invalid``;
    an invalid array with no committed call can be turned back into content
    from :attr:`raw`. :attr:`committed` is True once any call was emitted.
    """

    def __init__(self, sink: ToolCallSink, **call_kw: Any) -> None:
        self.sink = sink
        self.call_kw = call_kw
        self.raw: list[str] = []
        self.status = "parsing"
        self.state = "open"
        self.obj: CallObject | None = None
        self.calls = 0

    @property
    def committed(self) -> bool:
        """True once any element was emitted as a call."""
        return self.calls > 0 or (self.obj is not None and self.obj.committed)

    def push(self, ch: str) -> bool:
        """Read one character; False when it is not consumed."""
        if self.status != "parsing":
            return False
        ok = self._step(ch)
        if ok:
            self.raw.append(ch)
        return ok

    def _step(self, ch: str) -> bool:
        """The state machine; returns whether ``ch`` was consumed."""
        if self.state == "open":
            if ch != "[":
                self.status = "invalid"
                return False
            self.state = "item"
            return True
        if self.state == "item":
            if ch in _WS:
                return True
            if ch == "]" and self.calls > 0:
                self.status = "done"
                return True
            self.obj = CallObject(self.sink, **self.call_kw)
            self.state = "in_item"
        if self.state == "in_item":
            assert self.obj is not None
            if self.obj.push(ch):
                return True
            if self.obj.status == "done":
                self.calls += 1
                self.obj = None
                self.state = "after"
                if self.sink.done:
                    self.status = "done"
                    return False
                return self._step(ch)
            self.status = "invalid"
            return False
        if self.state == "after":
            if ch in _WS:
                return True
            if ch == ",":
                self.state = "item"
                return True
            if ch == "]":
                self.status = "done"
                return True
            self.status = "invalid"
            return False
        return False

    def close(self) -> bool:
        """End of input inside the array: complete an open committed call.
        Returns whether any call was committed."""
        if self.obj is not None:
            self.obj.close()
        return self.committed
