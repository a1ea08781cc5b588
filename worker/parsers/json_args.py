"""Streaming one tool call's arguments object into a
:class:`~worker.parsers.base.ToolCallSink` as it is scanned.

:class:`ArgStream` sends only safe prefixes of the object (see
:mod:`worker.parsers.json_scanner`), so arguments cut off at any point are
completed at :meth:`ArgStream.close`; :func:`arguments_text` converts
arguments written as something other than an object.
"""

from __future__ import annotations

import json
from typing import Any

from worker.parsers.base import ToolCallSink
from worker.parsers.json_scanner import JsonScanner


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
