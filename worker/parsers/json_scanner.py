"""Incremental JSON scanning: one JSON value read a character at a time.

:class:`JsonScanner` always knows (a) whether the value is complete, (b)
whether the text is still a valid JSON prefix and (c) the longest prefix
that can be completed by only appending closing characters (``"``, ``}``,
``]``) — the *safe* prefix. Streaming only safe prefixes means an argument
stream cut off at any point can still be closed into valid JSON, so nothing
sent to a client has to be taken back (:mod:`worker.parsers.json_args`).

Raw control characters inside strings (invalid JSON, but models write raw
newlines) are escaped in the scanned text, so emitted arguments always parse.
Pure Python, no I/O; one scanner per value, used by one parser's thread.
"""

from __future__ import annotations

import json
import re

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?\Z")
_NUM_CHARS = frozenset("0123456789+-.eE")
_LITERALS = ("true", "false", "null")
WHITESPACE = " \t\r\n"
"""JSON's insignificant whitespace characters."""
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
        elif ch in WHITESPACE:
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
