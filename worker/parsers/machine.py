"""The skeleton every tool-call family parser is built on.

:class:`ToolTextParser` buffers raw text, runs the family's state machine
(:meth:`ToolTextParser._step`) until it makes no more progress, and hands
out content and tool-call pieces. It supplies the content state shared by
all marker-based families: content streams out immediately except a suffix
that may be the start of an opening marker, which is held back until the
next text shows what it is.

Conventions every family follows:

- Once the sink is ``done`` (``parallel_tool_calls`` False and one call is
  complete), everything else is dropped.
- Markup that turns out not to form a call before anything of the call was
  emitted goes out as content, unchanged (nothing is lost).
- At :meth:`finish`, whitespace-only content held back after a tool call is
  dropped (the text between or after calls, such as a final newline).
"""

from __future__ import annotations

from typing import Callable

from worker.parsers.base import ParsedDelta, ToolCallSink, find_first, held_suffix


class ToolTextParser:
    """Base of the family tool parsers (see the module docstring).

    Subclasses set :attr:`OPENERS` (markers that start tool markup inside
    content) and :attr:`STRIP_NEWLINE` (drop one ``\\n`` right before an
    opener), implement :meth:`_open` (enter the family's markup state) and
    :meth:`_step` for their other states, and :meth:`_end` for what is
    still open when the input ends.
    """

    OPENERS: tuple[str, ...] = ()
    STRIP_NEWLINE = False

    def __init__(self, sink: ToolCallSink) -> None:
        self.sink = sink
        self.buf = ""
        self.state = "content"
        self.broken = ""
        self._segments: list[tuple[str, str]] = []
        holds = list(self.OPENERS)
        if self.STRIP_NEWLINE:
            holds += ["\n" + o for o in self.OPENERS]
        self._holds = tuple(holds)

    @property
    def saw_tool_call(self) -> bool:
        """True once any tool call was emitted."""
        return self.sink.saw

    @property
    def done(self) -> bool:
        """True when nothing more will be emitted (single call complete)."""
        return self.sink.done

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
        self.sink.finish()
        self.buf = ""
        return self._take_segments()

    def _run(self, final: bool) -> None:
        """Step the state machine until it stops making progress."""
        while not self.sink.done and self._step(final):
            pass
        if self.sink.done:
            self.buf = ""

    def _take_segments(self) -> list[tuple[str, str]]:
        """The pending text segments, cleared."""
        out, self._segments = self._segments, []
        return out

    def _take(self, segments: list[tuple[str, str]]) -> ParsedDelta:
        """``segments`` and the sink's pending pieces as one delta."""
        out = ParsedDelta(tool_calls=self.sink.take())
        for kind, text in segments:
            if kind == "reasoning":
                out.reasoning += text
            else:
                out.content += text
        return out

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

    def content_step(self, final: bool) -> bool:
        """The content state: emit text up to the next opener and enter
        markup (True), or emit what cannot start an opener (False)."""
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

    def drop_until(self, final: bool, ends: tuple[str, ...], stops: tuple[str, ...] = ()) -> bool:
        """Drop text up to and including the first of ``ends``, or up to the
        first of ``stops``, then return to content (True); without either,
        drop what cannot start one of them (False)."""
        i, m = find_first(self.buf, ends + stops)
        if i >= 0:
            self.buf = self.buf[i + len(m) :] if m in ends else self.buf[i:]
            self.state = "content"
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

    def _open(self, marker: str, raw: str) -> None:
        """Enter the markup started by ``marker`` (``raw``: its text as it
        appeared, including a stripped newline, for a fallback to content)."""
        raise NotImplementedError

    def _step(self, final: bool) -> bool:
        """One step of the state machine; True if it made progress."""
        if self.state == "content":
            return self.content_step(final)
        raise NotImplementedError

    def _end(self) -> None:
        """The input ended in a markup state: complete or give up."""
