"""DeepSeek V3 / R1 / V3.1 tool calls (note the fullwidth ``｜`` and ``▁``).

V3 and R1::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

V3.1::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>

The form is told apart by what follows ``<｜tool▁sep｜>``: a ``{`` means
V3.1 (the text before the separator is the name), anything else V3 (the
name is the rest of that line). Arguments stream as they arrive. Calls may
be separated by whitespace; a section may also start directly at
``<｜tool▁call▁begin｜>``.
"""

from __future__ import annotations

import re

from worker.parsers.base import ToolCallSink, held_suffix, is_marker_prefix
from worker.parsers.family import ToolFamily
from worker.parsers.json_args import ArgStream
from worker.parsers.lark_rules import args_schema, json_rule, lark_str, more_calls
from worker.parsers.machine import ToolTextParser

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
_FENCE = re.compile(r"\s*```[a-zA-Z]*[ \t]*\n?")
_NAME_LIMIT = 256


class DeepSeekV3Parser(ToolTextParser):
    """Streaming parser of DeepSeek tool-call sections (see the module):
    reads the section, each call's head and fence; the arguments are the
    machine's ``args`` state."""

    OPENERS = (CALLS_BEGIN, CALL_BEGIN)
    AFTER_ARGS = "call_tail"
    HEAD_STATES = ("head", "after_sep", "v3_name")

    def __init__(self, sink: ToolCallSink) -> None:
        super().__init__(sink)
        self.head = ""

    def _open(self, marker: str, raw: str) -> None:
        """Enter a tool-call section."""
        self.raw = raw
        if marker == CALL_BEGIN:
            self.state = "head"
        else:
            self.state = "section"

    def _state_section(self, final: bool) -> bool:
        """Inside a section: the next call, or the section's end."""
        stripped = self.buf.lstrip()
        for marker, nxt in ((CALL_BEGIN, "head"), (CALLS_END, "content")):
            if stripped.startswith(marker):
                self.raw += self.buf[: len(self.buf) - len(stripped) + len(marker)]
                self.buf = stripped[len(marker) :]
                self.state = nxt
                if nxt == "content":
                    self.raw = ""
                return True
        if not stripped or is_marker_prefix(stripped, (CALL_BEGIN, CALLS_END)):
            return False
        if self.sink.saw:
            self.buf = stripped
            self.raw = ""
            self.state = "content"
            return True
        return self.give_back(self.raw)

    def _state_head(self, final: bool) -> bool:
        """A call's head, up to ``<｜tool▁sep｜>``."""
        i = self.buf.find(SEP)
        end = i if i >= 0 else len(self.buf) - held_suffix(self.buf, (SEP,))
        if len(self.buf[:end]) > _NAME_LIMIT or "<｜" in self.buf[:end]:
            return self.give_back(self.raw)
        if i < 0:
            return False
        self.head = self.buf[:i].strip()
        self.raw += self.buf[: i + len(SEP)]
        self.buf = self.buf[i + len(SEP) :]
        self.state = "after_sep"
        return True

    def _state_after_sep(self, final: bool) -> bool:
        """After the separator: ``{`` means V3.1, anything else V3."""
        stripped = self.take_space_into_raw()
        if not stripped:
            return False
        if stripped[0] == "{":
            if not self.head:
                return self.give_back(self.raw)
            return self._start_call(self.head)
        self.state = "v3_name"
        return True

    def _state_v3_name(self, final: bool) -> bool:
        """V3: the name is the rest of the line."""
        i = self.buf.find("\n")
        line = self.buf[:i] if i >= 0 else self.buf
        if len(line) > _NAME_LIMIT or "<｜" in line:
            return self.give_back(self.raw)
        if i < 0:
            return False
        name = line.strip()
        if not name:
            return self.give_back(self.raw)
        self.buf = self.buf[i + 1 :]
        return self._start_call(name, fence=True)

    def _state_fence(self, final: bool) -> bool:
        """V3: skip the opening code fence before the arguments."""
        stripped = self.buf.lstrip()
        if not stripped:
            return False
        if stripped[0] == "{":
            self.buf = stripped
            self.state = "args"
            return True
        if "\n" not in stripped and not final and "`" in stripped[:1]:
            return False
        m = _FENCE.match(stripped)
        self.buf = stripped[m.end() :] if m else stripped
        self.state = "args"
        return True

    def _state_call_tail(self, final: bool) -> bool:
        """After a call's arguments: drop the closing fence and markers up
        to ``<｜tool▁call▁end｜>``, then continue the section."""
        return self.drop_until(final, (CALL_END, CALLS_END), then={CALL_END: "section"})

    def _start_call(self, name: str, fence: bool = False) -> bool:
        """The name is known: open the call and read its arguments."""
        index = self.sink.open(name)
        self.raw = ""
        self.args = ArgStream(self.sink, index)
        self.state = "fence" if fence else "args"
        return True

    def _end(self) -> None:
        """Input ended: a section with no call yet is content; else as the
        machine does."""
        if self.state == "section" and not self.sink.saw:
            self.emit(self.raw + self.buf)
        else:
            super()._end()


def grammar(tools, *, max_calls: int, lit) -> str:
    """Lark grammar forcing a DeepSeek tool-call section with 1..``max_calls``
    calls of ``tools``, in the V3 or V3.1 form."""
    rules = []
    calls = []
    for i, tool in enumerate(tools):
        schema = args_schema(tool)
        name = lark_str(tool.name)
        rules.append(f"args{i}: {json_rule(schema)}")
        rules.append(
            f'call{i}: {lit(CALL_BEGIN)} ("function" {lit(SEP)} {name} "\\n```json\\n" args{i} '
            f'"\\n```" | {name} {lit(SEP)} args{i}) {lit(CALL_END)}'
        )
        calls.append(f"call{i}")
    rep = more_calls('"\\n"? call', max_calls)
    return (
        f"start: {lit(CALLS_BEGIN)} call{rep} {lit(CALLS_END)}\ncall: {' | '.join(calls)}\n" + "\n".join(rules) + "\n"
    )


FAMILY = ToolFamily(
    name="deepseek_v3",
    parser=lambda sink, tools, thinking_open: DeepSeekV3Parser(sink),
    grammar=grammar,
    grammar_markers=(CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP),
    detect=lambda text: CALLS_BEGIN in text,
    detect_rank=50,
    vocab_markers=(CALLS_BEGIN,),
)
"""DeepSeek's declaration (see :class:`~worker.parsers.family.ToolFamily`)."""
