"""Splitting reasoning blocks out of the output: ``<think>...</think>``
(DeepSeek-R1, Qwen3, SmolLM3, ...) and ``[THINK]...[/THINK]`` (Magistral).

Reasoning text is passed on verbatim. The markers themselves are dropped,
and so is the single newline right after a closing marker (models write
``</think>\\n`` before the answer). With ``thinking_open`` (the prompt
already opened the block) the output starts as reasoning. A closing marker
seen while not in a block — a stray ``</think>`` — is dropped and the text
before it stays content. Reasoning blocks may occur more than once.
"""

from __future__ import annotations

from worker.parsers.base import ParsedDelta, find_first, held_suffix

MARKERS = {
    "think": ("<think>", "</think>"),
    "think_mistral": ("[THINK]", "[/THINK]"),
}
"""Opening and closing markers of each marker-based reasoning format."""


class ReasoningSplitter:
    """Streaming splitter of one reasoning format (see the module).

    :meth:`feed` returns the new content and reasoning; text that may be
    the start of a marker is held back until the next piece shows what it
    is. :meth:`finish` flushes what is held into the current stream. The
    ``*_segments`` variants keep the order of content and reasoning.
    """

    def __init__(self, reasoning_format: str, *, thinking_open: bool = False) -> None:
        self.open, self.close = MARKERS[reasoning_format]
        self.in_reasoning = thinking_open
        self.strip_newline = False
        self.buf = ""

    def feed(self, text: str) -> ParsedDelta:
        """Split the next raw text."""
        return ParsedDelta.from_segments(self.feed_segments(text))

    def finish(self) -> ParsedDelta:
        """End of input: everything held goes to the current stream."""
        return ParsedDelta.from_segments(self.finish_segments())

    def feed_segments(self, text: str) -> list[tuple[str, str]]:
        """Like :meth:`feed`, as ordered ``(kind, text)`` segments (kind
        ``content`` or ``reasoning``)."""
        self.buf += text
        return self._run(False)

    def finish_segments(self) -> list[tuple[str, str]]:
        """Like :meth:`finish`, as ordered segments."""
        return self._run(True)

    def _run(self, final: bool) -> list[tuple[str, str]]:
        """Consume as much of the buffer as is decidable."""
        out: list[tuple[str, str]] = []

        def add(kind: str, text: str) -> None:
            """Append a non-empty segment."""
            if text:
                out.append((kind, text))

        while True:
            if self.strip_newline and self.buf:
                if self.buf.startswith("\n"):
                    self.buf = self.buf[1:]
                self.strip_newline = False
            if self.in_reasoning:
                i = self.buf.find(self.close)
                if i >= 0:
                    add("reasoning", self.buf[:i])
                    self.buf = self.buf[i + len(self.close) :]
                    self.in_reasoning = False
                    self.strip_newline = True
                    continue
                keep = 0 if final else held_suffix(self.buf, (self.close,))
                add("reasoning", self.buf[: len(self.buf) - keep])
            else:
                i, m = find_first(self.buf, (self.open, self.close))
                if i >= 0:
                    add("content", self.buf[:i])
                    self.buf = self.buf[i + len(m) :]
                    if m == self.open:
                        self.in_reasoning = True
                    else:
                        self.strip_newline = True
                    continue
                keep = 0 if final else held_suffix(self.buf, (self.open, self.close))
                add("content", self.buf[: len(self.buf) - keep])
            self.buf = self.buf[len(self.buf) - keep :]
            return out
