"""Building a request's parser: reasoning split first, then tool parsing of
the content stream (see :func:`make_parser`). The tool stage is the parser
of the family declared in :mod:`worker.parsers.registry`."""

from __future__ import annotations

from typing import Any

from worker.parsers.base import OutputParser, ParsedDelta, SinkStatus, ToolCallSink
from worker.parsers.harmony import HarmonyParser
from worker.parsers.reasoning_splitter import MARKERS, ReasoningSplitter
from worker.parsers.registry import tool_family

REASONING_FORMATS: tuple[str, ...] = ("think", "think_mistral", "harmony")
"""Reasoning formats :func:`make_parser` accepts (also valid config overrides)."""

GENERIC_TOOL_FORMAT = "hermes"
"""The format the worker asks for, with its own system-prompt instructions,
when a model's template shows no tool-call format of its own."""


class ComposedParser(SinkStatus):
    """An :class:`~worker.parsers.base.OutputParser` made of an optional
    reasoning stage and an optional tool-call stage.

    The first stage splits raw text into reasoning and content; the second
    parses tool calls out of that content. Either may be absent (text then
    passes through unchanged). Once the tool stage is done (as many
    complete calls as ``max_tool_calls`` allows), everything else is dropped.
    """

    def __init__(self, first: Any | None, second: Any | None, sink: ToolCallSink) -> None:
        self.first = first
        self.second = second
        self.sink = sink

    def feed(self, text: str) -> ParsedDelta:
        """Take the next raw text; return what is safe to emit."""
        if self.sink.done:
            return ParsedDelta()
        segments = self.first.feed_segments(text) if self.first else [("content", text)]
        return self._through(segments)

    def finish(self) -> ParsedDelta:
        """End of input: flush both stages."""
        if self.sink.done:
            return ParsedDelta(tool_calls=self.sink.take())
        out = self._through(self.first.finish_segments() if self.first else [])
        if self.second is not None and not self.sink.done:
            out.extend(self.second.finish())
        self.sink.finish()
        return out.extend(ParsedDelta(tool_calls=self.sink.take()))

    def _through(self, segments: list[tuple[str, str]]) -> ParsedDelta:
        """Run the first stage's segments, in order, through the tool stage;
        stop at once when that is done (so nothing after the call survives).
        A first stage that makes calls itself (Harmony) drops what follows
        them on its own."""
        out = ParsedDelta()
        for kind, text in segments:
            if self.second is not None and self.sink.done:
                break
            if kind == "reasoning":
                out.reasoning += text
            elif self.second is None:
                out.content += text
            else:
                out.extend(self.second.feed(text))
        return out.extend(ParsedDelta(tool_calls=self.sink.take()))


def make_parser(
    *,
    tool_format: str | None,
    reasoning_format: str | None,
    tools: list[Any] | None,
    thinking_open: bool = False,
    max_tool_calls: int | None = None,
    end_on_repeat: bool = False,
) -> OutputParser:
    """A fresh parser for one request's (one choice's) output.

    ``tool_format`` None, or no ``tools``, means no tool parsing;
    ``reasoning_format`` None means no reasoning split. ``thinking_open``:
    the prompt already opened the reasoning block, so the output starts as
    reasoning. ``max_tool_calls`` (None: no limit; 1 when parallel calls
    are off) keeps only that many complete calls and then sets ``done``
    (the worker should stop generating). ``end_on_repeat``: a call that
    repeats an earlier one ends the turn (for forced calls; see
    :class:`~worker.parsers.base.ToolCallSink`).
    Harmony as either format yields one parser handling channels and calls.
    Unknown format names raise ValueError.
    """
    family = tool_family(tool_format) if tool_format is not None else None
    if reasoning_format is not None and reasoning_format not in REASONING_FORMATS:
        raise ValueError(f"unknown reasoning format {reasoning_format!r}; expected one of {REASONING_FORMATS}")
    sink = ToolCallSink(max_calls=max_tool_calls, end_on_repeat=end_on_repeat)
    use_tools = tool_format is not None and bool(tools)
    first: Any | None = None
    second: Any | None = None
    if reasoning_format == "harmony":
        first = HarmonyParser(sink, tools_enabled=use_tools and tool_format == "harmony", thinking_open=thinking_open)
    elif reasoning_format in MARKERS:
        first = ReasoningSplitter(reasoning_format, thinking_open=thinking_open)
    if use_tools and not (tool_format == "harmony" and reasoning_format == "harmony"):
        assert family is not None and tools
        second = family.parser(sink, list(tools), thinking_open and reasoning_format is None)
    return ComposedParser(first, second, sink)
