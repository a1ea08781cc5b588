"""Whole JSON call objects, ``{"name": ..., "arguments": {...}}``, parsed
incrementally for the JSON families (hermes, mistral's older form,
llama3_json, json): :class:`CallObject` one object, :class:`CallList` a JSON
array of them. The call is opened in the sink as soon as its name is known
and its arguments stream through :class:`~worker.parsers.json_args.ArgStream`.
"""

from __future__ import annotations

import json
from typing import Any

from worker.parsers.base import ToolCallSink
from worker.parsers.json_args import ArgStream, arguments_text
from worker.parsers.json_scanner import WHITESPACE, JsonScanner


class _CallReader:
    """What :class:`CallObject` and :class:`CallList` share: :attr:`status`
    (``parsing``, ``done`` or ``invalid``), :attr:`raw` (every character
    consumed) and :meth:`push` around the subclass's ``_step``."""

    def __init__(self) -> None:
        self.raw: list[str] = []
        self.status = "parsing"

    def push(self, ch: str) -> bool:
        """Read one character; False when it is not consumed."""
        if self.status != "parsing":
            return False
        ok = self._step(ch)
        if ok:
            self.raw.append(ch)
        return ok

    def _step(self, ch: str) -> bool:
        """The subclass's state machine; returns whether ``ch`` was consumed."""
        raise NotImplementedError


class CallObject(_CallReader):
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
        super().__init__()
        self.sink = sink
        self.arg_keys = arg_keys
        self.strict = strict
        self.names = names
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

    def _invalid(self) -> bool:
        """Mark the object invalid; a committed call is closed as it is."""
        self.status = "invalid"
        if self.committed:
            self._finish_call()
        return False

    def _step(self, ch: str) -> bool:
        """The state machine; returns whether ``ch`` was consumed."""
        st = self.state
        if st in ("open", "key_or_end", "key", "colon", "value", "after") and ch in WHITESPACE:
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


class CallList(_CallReader):
    """Parses a JSON array of call objects, ``[{...}, {...}]``, from its ``[``.

    Each element is a :class:`CallObject` (same ``strict``/``names`` rules).
    :attr:`status` is ``parsing``, ``done`` (after ``]``) or ``invalid``;
    an invalid array with no committed call can be turned back into content
    from :attr:`raw`. :attr:`committed` is True once any call was emitted.
    """

    def __init__(self, sink: ToolCallSink, **call_kw: Any) -> None:
        super().__init__()
        self.sink = sink
        self.call_kw = call_kw
        self.state = "open"
        self.obj: CallObject | None = None
        self.calls = 0

    @property
    def committed(self) -> bool:
        """True once any element was emitted as a call."""
        return self.calls > 0 or (self.obj is not None and self.obj.committed)

    def _step(self, ch: str) -> bool:
        """The state machine; returns whether ``ch`` was consumed."""
        if self.state == "open":
            if ch != "[":
                self.status = "invalid"
                return False
            self.state = "item"
            return True
        if self.state == "item":
            if ch in WHITESPACE:
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
            if ch in WHITESPACE:
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
