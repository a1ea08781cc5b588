"""The state machine every tool-call family parser is built on.

:class:`ToolTextParser` buffers raw text, runs the family's states until
they make no more progress, and hands out content and tool-call pieces. A
state is a method ``_state_<name>(final)`` that consumes what it can of
:attr:`~ToolTextParser.buf` and returns True when it made progress (the
machine then runs the current state again). The machine supplies the states
the families share, so a family module holds only its own markup:

- ``content``: content streams out immediately except a suffix that may be
  the start of an opening marker (:attr:`~ToolTextParser.OPENERS`), held
  back until the next text shows what it is; an opener enters the family's
  markup (:meth:`~ToolTextParser._open`).
- ``json``: a whole JSON call object or array (:attr:`~ToolTextParser.obj`,
  a :class:`~worker.parsers.json_calls.CallObject` or ``CallList``) is read;
  if it is not a call, the markup read (:attr:`~ToolTextParser.raw` and the
  object's text) is given back (:meth:`~ToolTextParser._not_a_call`).
- ``args``: one call's arguments object streams through
  :attr:`~ToolTextParser.args` (an :class:`~worker.parsers.json_args.ArgStream`),
  then :attr:`~ToolTextParser.AFTER_ARGS`.
- ``broken``: markup that turned out not to be a call is given back as
  content up to the end of its block (:attr:`~ToolTextParser.CLOSERS`) or
  the next opener; ``drop``: the rest of a block is dropped the same way.
- ``text``: after whole-output calls, the rest is content (whitespace after
  the calls held and dropped at the end).

Conventions every family follows:

- Once the sink is ``done`` (``parallel_tool_calls`` False and one call is
  complete), everything else is dropped.
- Markup that turns out not to form a call before anything of the call was
  emitted goes out as content, unchanged (nothing is lost).
- At :meth:`~ToolTextParser.finish`, whitespace-only content held back
  after a tool call is dropped (the text between or after calls, such as a
  final newline).

One parser per choice; it is used by one thread (the worker's output
thread) and does no I/O.
"""

from __future__ import annotations

from typing import Callable, Mapping

from worker.parsers.base import ParsedDelta, SinkStatus, ToolCallSink, find_first, held_suffix
from worker.parsers.json_args import ArgStream
from worker.parsers.json_calls import CallList, CallObject


class ToolTextParser(SinkStatus):
    """Base of the family tool parsers (see the module docstring).

    Subclasses set :attr:`OPENERS` (markers that start tool markup inside
    content), :attr:`STRIP_NEWLINE` (drop one ``\\n`` right before an
    opener), :attr:`CLOSERS` (markers that end a block, for ``broken`` and
    ``drop``) and :attr:`AFTER_ARGS`; implement :meth:`_open` (enter the
    family's markup) and one ``_state_<name>`` method per state of their
    own; and override :meth:`_json_ended`, :meth:`_not_a_call` and
    :meth:`_end` where the family differs from the defaults.
    :attr:`HEAD_STATES` are the states in which markup was read but no call
    was opened yet: input ending there gives :attr:`raw` and the buffer
    back as content.
    """

    OPENERS: tuple[str, ...] = ()
    STRIP_NEWLINE = False
    CLOSERS: tuple[str, ...] = ()
    AFTER_ARGS = "content"
    HEAD_STATES: tuple[str, ...] = ()

    def __init__(self, sink: ToolCallSink) -> None:
        self.sink = sink
        self.buf = ""
        self.state = "content"
        self.raw = ""
        self.broken = ""
        self.obj: CallObject | CallList | None = None
        self.args: ArgStream | None = None
        self.scanned = 0
        self._segments: list[tuple[str, str]] = []
        holds = list(self.OPENERS)
        if self.STRIP_NEWLINE:
            holds += ["\n" + o for o in self.OPENERS]
        self._holds = tuple(holds)

    def feed(self, text: str) -> ParsedDelta:
        """Take the next raw text; return what is safe to emit."""
        return self._take(self.feed_segments(text))

    def finish(self) -> ParsedDelta:
        """End of input: flush held text and close or give up open markup."""
        return self._take(self.finish_segments())

    def feed_segments(self, text: str) -> list[tuple[str, str]]:
        """Like :meth:`feed`, but return the text streams as ordered
        ``(kind, text)`` segments (kind ``content`` or ``reasoning``) and
        leave tool-call pieces in the sink."""
        if not self.sink.done:
            self.buf += text
            self._run(False)
        return self._take_segments()

    def finish_segments(self) -> list[tuple[str, str]]:
        """Like :meth:`finish`, as ordered segments (see :meth:`feed_segments`)."""
        if not self.sink.done:
            self._run(True)
            if not self.sink.done:
                self._end()
                self.raw = self.broken = ""
        self.sink.finish()
        self.buf = ""
        return self._take_segments()

    def _run(self, final: bool) -> None:
        """Run the current state until it stops making progress."""
        while not self.sink.done and getattr(self, "_state_" + self.state)(final):
            pass
        if self.sink.done:
            self.buf = ""

    def _take_segments(self) -> list[tuple[str, str]]:
        """The pending text segments, cleared."""
        out, self._segments = self._segments, []
        return out

    def _take(self, segments: list[tuple[str, str]]) -> ParsedDelta:
        """``segments`` and the sink's pending pieces as one delta."""
        return ParsedDelta.from_segments(segments, self.sink.take())

    def _segment(self, kind: str, text: str) -> None:
        """Append output text of ``kind`` (dropped once the sink is done)."""
        if not text or self.sink.done:
            return
        if self._segments and self._segments[-1][0] == kind:
            self._segments[-1] = (kind, self._segments[-1][1] + text)
        else:
            self._segments.append((kind, text))

    def emit(self, text: str) -> None:
        """Send ``text`` as content (dropped once the sink is done)."""
        self._segment("content", text)

    def emit_reasoning(self, text: str) -> None:
        """Send ``text`` as reasoning (dropped once the sink is done)."""
        self._segment("reasoning", text)

    # --- helpers for the families' states ---------------------------------------------

    def pump(self, push: Callable[[str], bool]) -> int:
        """Feed buffered characters to ``push`` until it refuses one; remove
        the consumed ones from the buffer and return how many there were."""
        buf = self.buf
        i = 0
        n = len(buf)
        while i < n and push(buf[i]):
            i += 1
        self.buf = buf[i:]
        return i

    def give_back(self, text: str, state: str = "content") -> bool:
        """Markup that is not a call: ``text`` goes out as content, the
        markup read is forgotten and the machine goes to ``state``; True."""
        self.emit(text)
        self.raw = ""
        self.obj = None
        self.state = state
        return True

    def give_back_block(self, text: str) -> bool:
        """Markup that is not a call, inside a block: ``text`` and the rest
        of the block go out as content once the block ends (state
        ``broken``); True."""
        self.broken = text
        self.raw = ""
        self.state = "broken"
        return True

    def take_space_into_raw(self) -> str:
        """Move the buffer's leading whitespace to :attr:`raw` and return
        the rest, which starts the buffer; empty (nothing moved) when the
        buffer is only whitespace."""
        stripped = self.buf.lstrip()
        if stripped:
            self.raw += self.buf[: len(self.buf) - len(stripped)]
            self.buf = stripped
        return stripped

    def skip_marker(self, final: bool, marker: str, then: str, *, keep_space: bool = False) -> bool:
        """After a call: whitespace and an optional ``marker`` are dropped
        and the machine goes to ``then`` (True). Other text goes to ``then``
        as well, its leading whitespace dropped unless ``keep_space``. While
        the buffer is whitespace or the start of ``marker``: wait (False)."""
        stripped = self.buf.lstrip()
        if stripped.startswith(marker):
            self.buf = stripped[len(marker) :]
            self.state = then
            return True
        if stripped and not marker.startswith(stripped):
            if not keep_space:
                self.buf = stripped
            self.state = then
            return True
        if final:
            self.buf = ""
        return False

    def find_end(self, ends: tuple[str, ...]) -> tuple[int, str]:
        """The first of ``ends`` in the buffer, ``(position, marker)`` or
        ``(-1, "")``; a search that fails resumes where a marker could still
        start, so a long value is not rescanned on every piece."""
        i, m = find_first(self.buf, ends, self.scanned)
        if i < 0:
            self.scanned = max(0, len(self.buf) - max(map(len, ends)) + 1)
        else:
            self.scanned = 0
        return i, m

    def drop_until(
        self,
        final: bool,
        ends: tuple[str, ...],
        stops: tuple[str, ...] = (),
        then: Mapping[str, str] | None = None,
    ) -> bool:
        """Drop text up to and including the first of ``ends``, or up to the
        first of ``stops``, then go to ``then[marker]`` (default content;
        True); without either, drop what cannot start one of them (False)."""
        i, m = find_first(self.buf, ends + stops)
        if i >= 0:
            self.buf = self.buf[i + len(m) :] if m in ends else self.buf[i:]
            self.state = (then or {}).get(m, "content")
            return True
        keep = 0 if final else held_suffix(self.buf, ends + stops)
        self.buf = self.buf[len(self.buf) - keep :]
        return False

    def give_back_until(self, final: bool, ends: tuple[str, ...], stops: tuple[str, ...] = ()) -> bool:
        """Markup that is not a call: :attr:`broken` plus the text up to and
        including the first of ``ends`` (or up to the first of ``stops``) goes
        out as content, then back to content (True). Without either, the
        text is moved to :attr:`broken` except what may start a marker."""
        i, m = find_first(self.buf, ends + stops)
        if i >= 0:
            end = i + len(m) if m in ends else i
            self.emit(self.broken + self.buf[:end])
            self.broken = ""
            self.buf = self.buf[end:]
            self.state = "content"
            return True
        keep = 0 if final else held_suffix(self.buf, ends + stops)
        self.broken += self.buf[: len(self.buf) - keep]
        self.buf = self.buf[len(self.buf) - keep :]
        return False

    # --- the shared states ------------------------------------------------------------

    def _state_content(self, final: bool) -> bool:
        """Emit text up to the next opener and enter markup (True), or emit
        what cannot start an opener (False)."""
        i, marker = find_first(self.buf, self.OPENERS)
        if i >= 0:
            before = self.buf[:i]
            newline = ""
            if self.STRIP_NEWLINE and before.endswith("\n"):
                before, newline = before[:-1], "\n"
            self.emit(before)
            self.buf = self.buf[i + len(marker) :]
            self._open(marker, newline + marker)
            return True
        keep = 0 if final else held_suffix(self.buf, self._holds)
        out = self.buf[: len(self.buf) - keep]
        self.buf = self.buf[len(out) :]
        if final and self.sink.saw and not out.strip():
            out = ""
        self.emit(out)
        return False

    def _state_json(self, final: bool) -> bool:
        """Read a JSON call object or array (:attr:`obj`) to its end."""
        obj = self.obj
        assert obj is not None
        self.pump(obj.push)
        if obj.status == "parsing":
            return False
        if obj.status == "invalid" and not obj.committed:
            return self._not_a_call(self.raw + "".join(obj.raw))
        self.obj = None
        self.raw = ""
        self._json_ended(obj.status == "done")
        return True

    def _state_args(self, final: bool) -> bool:
        """Stream a call's arguments (:attr:`args`); at their end (or at
        invalid text) close the call and go to :attr:`AFTER_ARGS`."""
        args = self.args
        assert args is not None
        self.pump(args.push)
        if args.done or args.error:
            args.close()
            self.args = None
            self.state = self.AFTER_ARGS
            return True
        return False

    def _state_broken(self, final: bool) -> bool:
        """Give the markup back as content up to the end of its block."""
        return self.give_back_until(final, self.CLOSERS, self.OPENERS)

    def _state_drop(self, final: bool) -> bool:
        """Drop the rest of a block whose call was already closed."""
        return self.drop_until(final, self.CLOSERS, self.OPENERS)

    def _state_text(self, final: bool) -> bool:
        """After whole-output calls: the rest is content, except whitespace
        after the calls, held and dropped at the end."""
        if self.sink.saw and not self.buf.strip():
            if final:
                self.buf = ""
            return False
        self.emit(self.buf)
        self.buf = ""
        return False

    # --- what the families supply -----------------------------------------------------

    def _open(self, marker: str, raw: str) -> None:
        """Enter the markup started by ``marker`` (``raw``: its text as it
        appeared, including a stripped newline, for a fallback to content)."""
        raise NotImplementedError

    def _json_ended(self, complete: bool) -> None:
        """The ``json`` state read a call (``complete``: it ended properly,
        else it broke off after the call was opened and was closed as it
        was): continue with content."""
        self.state = "content"

    def _not_a_call(self, text: str) -> bool:
        """The ``json`` state's object is not a call: ``text`` (the markup
        and the object's text) goes out as content; True."""
        return self.give_back(text)

    def _end(self) -> None:
        """The input ended in a markup state: close an open call (completing
        its arguments) or give unfinished markup back as content."""
        if self.state == "json" and self.obj is not None:
            if not self.obj.close():
                self.emit(self.raw + "".join(self.obj.raw) + self.buf)
        elif self.args is not None:
            self.args.close()
            self.args = None
        elif self.state == "broken":
            self.emit(self.broken + self.buf)
        elif self.state in self.HEAD_STATES:
            self.emit(self.raw + self.buf)
