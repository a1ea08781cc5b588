"""Shared types and helpers of the output parsers.

An output parser turns a model's raw output text, arriving in arbitrary
pieces, into three streams: user-visible ``content``, ``reasoning`` and
tool-call deltas (:class:`shared.protocol.ToolCallDelta`). Every parser is
per request (per choice) and keeps only that choice's state.

This module holds what every family shares: :class:`ParsedDelta`, the
:class:`OutputParser` protocol (with :class:`SinkStatus`, its status read
from the sink), the :class:`ToolCallSink` that numbers calls and gives them
ids, and the marker search and hold-back helpers.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Iterable, Protocol, runtime_checkable

from shared.protocol import ToolCallDelta


@dataclass
class ParsedDelta:
    """What a parser lets out for one piece of raw text.

    ``content`` and ``reasoning`` are new text of those streams (markup
    removed); ``tool_calls`` are new tool-call pieces in order, consecutive
    pieces of one call already merged.
    """

    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallDelta] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when the delta carries nothing."""
        return not (self.content or self.reasoning or self.tool_calls)

    @classmethod
    def from_segments(
        cls, segments: Iterable[tuple[str, str]], tool_calls: list[ToolCallDelta] | None = None
    ) -> ParsedDelta:
        """A delta of ordered ``(kind, text)`` segments (kind ``reasoning``,
        anything else content) and ``tool_calls``."""
        out = cls(tool_calls=tool_calls if tool_calls is not None else [])
        for kind, text in segments:
            if kind == "reasoning":
                out.reasoning += text
            else:
                out.content += text
        return out

    def extend(self, other: ParsedDelta) -> ParsedDelta:
        """Append ``other`` (which came later) to this delta in place; returns self."""
        self.content += other.content
        self.reasoning += other.reasoning
        if other.tool_calls:
            self.tool_calls = merge_tool_deltas(self.tool_calls + other.tool_calls)
        return self


@runtime_checkable
class OutputParser(Protocol):
    """A streaming, per-request splitter of raw output into content,
    reasoning and tool calls.

    ``feed`` takes the next raw text and returns what is safe to emit now
    (text that may still turn out to be markup is held back); ``finish`` is
    called once at the end of generation and flushes everything held, closing
    an open tool call if it can be completed and turning it into content if
    it cannot. ``saw_tool_call`` is True once any tool call was emitted and
    ``done`` once nothing more will be emitted (the last call
    ``max_tool_calls`` allows is complete): the worker may stop generating.
    """

    def feed(self, text: str) -> ParsedDelta:
        """New raw text → what is safe to emit now."""
        ...

    def finish(self) -> ParsedDelta:
        """End of generation: flush held text, complete or give up open calls."""
        ...

    @property
    def saw_tool_call(self) -> bool:
        """At least one tool call was emitted."""
        ...

    @property
    def done(self) -> bool:
        """Nothing more will be emitted (the worker may stop generating)."""
        ...


class SinkStatus:
    """``saw_tool_call`` and ``done`` of an :class:`OutputParser`, read from
    its :class:`ToolCallSink` (attribute ``sink``)."""

    sink: ToolCallSink

    @property
    def saw_tool_call(self) -> bool:
        """True once any tool call was emitted."""
        return self.sink.saw

    @property
    def done(self) -> bool:
        """True once nothing more will be emitted (the call limit was reached)."""
        return self.sink.done


def new_call_id() -> str:
    """A fresh tool-call id: ``call_`` and 24 random hex characters."""
    return "call_" + secrets.token_hex(12)


def merge_tool_deltas(deltas: list[ToolCallDelta]) -> list[ToolCallDelta]:
    """Merge consecutive pieces of the same call into one piece and drop
    empty continuation pieces; order and meaning are preserved."""
    out: list[ToolCallDelta] = []
    for d in deltas:
        if out and out[-1].index == d.index and d.id is None and d.name is None:
            prev = out[-1]
            if d.arguments:
                out[-1] = ToolCallDelta(
                    index=prev.index,
                    id=prev.id,
                    name=prev.name,
                    arguments=prev.arguments + d.arguments,
                )
            continue
        if d.id is None and d.name is None and not d.arguments:
            continue
        out.append(d)
    return out


class ToolCallSink:
    """Numbers, names and collects the tool-call pieces of one choice.

    A family parser calls :meth:`open` when a call's name is known (the first
    piece carries index, a fresh id, the name and maybe a first arguments
    fragment), :meth:`append` for more argument text and :meth:`close` when
    the call's arguments are complete. With ``max_calls`` set (None: no
    limit; 1 when parallel calls are off), closing that many calls sets
    :attr:`done`; parsers then drop everything else.

    With ``end_on_repeat`` (forced calls), a call that repeats an earlier
    call of the same choice (same name, same arguments as JSON) ends the
    turn instead: it is dropped and :attr:`done` is set (small models repeat
    a forced call until their token limit). So that a repeat can be
    dropped, the pieces of every call after the first are then held until
    the call closes; :meth:`finish` releases a call still open at the end
    of generation. Without it, identical calls are kept (a model may mean
    to call a tool twice).
    :meth:`take` returns and clears the pieces gathered so far.
    """

    def __init__(self, max_calls: int | None = None, end_on_repeat: bool = False) -> None:
        self.max_calls = max_calls
        self.end_on_repeat = end_on_repeat
        self.count = 0
        self.closed = 0
        self.done = False
        self._pending: list[ToolCallDelta] = []
        self._held: list[ToolCallDelta] = []
        self._calls: dict[int, tuple[str, list[str]]] = {}
        self._seen: set[tuple[str, str]] = set()

    @property
    def saw(self) -> bool:
        """True once any call was opened."""
        return self.count > 0

    def open(self, name: str, arguments: str = "") -> int:
        """Start a call named ``name``; returns its index."""
        index = self.count
        self.count += 1
        self._calls[index] = (name, [arguments])
        self._queue(ToolCallDelta(index=index, id=new_call_id(), name=name, arguments=arguments))
        return index

    def append(self, index: int, arguments: str) -> None:
        """Add ``arguments`` text to call ``index``."""
        if arguments:
            self._calls[index][1].append(arguments)
            self._queue(ToolCallDelta(index=index, arguments=arguments))

    def close(self, index: int) -> None:
        """Call ``index`` is complete (see the class docstring for repeats)."""
        name, parts = self._calls.pop(index, ("", []))
        key = (name, _canonical_arguments("".join(parts)))
        if self.end_on_repeat and key in self._seen:
            self._held = []
            self.count -= 1
            self.done = True
            return
        self._seen.add(key)
        self._pending += self._held
        self._held = []
        self.closed += 1
        if self.max_calls is not None and self.closed >= self.max_calls:
            self.done = True

    def finish(self) -> None:
        """End of generation: release the pieces of a call still open."""
        self._pending += self._held
        self._held = []

    def _queue(self, delta: ToolCallDelta) -> None:
        """Pieces of the first call stream at once; with ``end_on_repeat``
        later calls are held until they close."""
        (self._held if self.end_on_repeat and delta.index > 0 else self._pending).append(delta)

    def take(self) -> list[ToolCallDelta]:
        """The pieces gathered since the last call, merged, and forget them."""
        out = merge_tool_deltas(self._pending)
        self._pending = []
        return out


def _canonical_arguments(text: str) -> str:
    """``text`` as canonical JSON (sorted keys, no spaces) when it parses,
    else stripped: two calls with the same arguments compare equal."""
    try:
        return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return text.strip()


def find_first(text: str, markers: Iterable[str], start: int = 0) -> tuple[int, str]:
    """The earliest occurrence of any of ``markers`` in ``text`` at or after
    ``start``: ``(position, marker)``, the longer marker winning a tie, or
    ``(-1, "")`` when none occurs."""
    best, found = -1, ""
    for m in markers:
        i = text.find(m, start)
        if i >= 0 and (best < 0 or i < best or (i == best and len(m) > len(found))):
            best, found = i, m
    return best, found


def held_suffix(text: str, markers: Iterable[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of
    one of ``markers``: the text that must be held back because it may be
    the start of a marker."""
    best = 0
    for m in markers:
        for k in range(min(len(m) - 1, len(text)), best, -1):
            if text.endswith(m[:k]):
                best = k
                break
    return best


def is_marker_prefix(text: str, markers: Iterable[str]) -> bool:
    """True when ``text`` is a (possibly empty or complete) prefix of one of ``markers``."""
    return any(m.startswith(text) for m in markers)
