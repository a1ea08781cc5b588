"""OpenAI Harmony output (gpt-oss): channels and tool calls in one parser.

The output is a sequence of messages, each a header and a body::

    <|channel|>analysis<|message|>thinking...<|end|>
    <|start|>assistant<|channel|>final<|message|>the answer<|return|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>

(the prompt usually ends with ``<|start|>assistant``, so the first header
starts at ``<|channel|>``; ``to=`` may also come before ``<|channel|>``).

- ``analysis`` bodies are reasoning;
- ``final`` bodies, and ``commentary`` bodies without a recipient
  (preambles), are content;
- a body with a recipient ``to=functions.NAME`` is a tool call named NAME
  whose body is the JSON arguments (streamed); other recipients keep their
  full name. Without tool parsing, such bodies are content.

Headers and the ``<|end|>``, ``<|call|>`` and ``<|return|>`` markers never
reach any stream. Output that does not look like Harmony at all streams as
content. ``thinking_open`` means the prompt already opened an analysis
body.
"""

from __future__ import annotations

import re

from worker.parsers.base import ToolCallSink, find_first, held_suffix
from worker.parsers.family import ToolFamily
from worker.parsers.json_args import ArgStream
from worker.parsers.lark_rules import args_schema, json_rule, lark_str
from worker.parsers.machine import ToolTextParser

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
END, CALL, RETURN, CONSTRAIN = "<|end|>", "<|call|>", "<|return|>", "<|constrain|>"
SPECIAL = (START, CHANNEL, MESSAGE, END, CALL, RETURN, CONSTRAIN)
"""Harmony markers, all special tokens of the gpt-oss tokenizer."""

_BODY_END = (END, CALL, RETURN)
_HEADER_STARTS = (START, CHANNEL, "to=", "assistant")
_HEADER_LIMIT = 1024
_CHANNEL_RE = re.compile(r"<\|channel\|>\s*([A-Za-z_][\w-]*)")
_RECIPIENT_RE = re.compile(r"(?:^|\s|>)to=([^\s<]+)")


class HarmonyParser(ToolTextParser):
    """Streaming Harmony parser (see the module docstring): headers and
    bodies are its own states; output that is not Harmony is the machine's
    ``content`` state, with the header markers as its openers.

    ``tools_enabled`` turns recipient bodies into tool calls.
    """

    OPENERS = (START, CHANNEL)

    def __init__(self, sink: ToolCallSink, *, tools_enabled: bool, thinking_open: bool) -> None:
        super().__init__(sink)
        self.tools_enabled = tools_enabled
        self.header = ""
        self.kind = "reasoning" if thinking_open else ""
        self.state = "body" if thinking_open else "header"

    def _open(self, marker: str, raw: str) -> None:
        """Content reached ``<|start|>`` or ``<|channel|>``: the marker
        belongs to the header that follows, so it goes back to the buffer."""
        self.buf = marker + self.buf
        self.state = "header"

    def _state_header(self, final: bool) -> bool:
        """Gather a message header up to ``<|message|>``; text that cannot
        be a header (or is too long for one) is content (the machine's
        ``content`` state, which returns here at the next header marker)."""
        i = self.buf.find(MESSAGE)
        keep = 0 if i >= 0 else held_suffix(self.buf, (MESSAGE,))
        text = self.header + self.buf[: i if i >= 0 else len(self.buf) - keep]
        stripped = text.lstrip()
        plausible = any(stripped.startswith(h) or h.startswith(stripped) for h in _HEADER_STARTS)
        if not plausible or len(text) > _HEADER_LIMIT:
            self.buf = self.header + self.buf
            self.header = ""
            self.state = "content"
            return True
        if i >= 0:
            self.header = text
            self.buf = self.buf[i + len(MESSAGE) :]
            self._begin_body()
            return True
        self.header = text
        self.buf = self.buf[len(self.buf) - keep :]
        return False

    def _begin_body(self) -> None:
        """Classify the body that follows the header just read."""
        header, self.header = self.header, ""
        channel = _CHANNEL_RE.search(header)
        recipient = _RECIPIENT_RE.search(header)
        self.state = "body"
        name = recipient.group(1) if recipient else ""
        if name.startswith("functions."):
            name = name[len("functions.") :]
        if name and self.tools_enabled:
            self.kind = "call"
            self.args = ArgStream(self.sink, self.sink.open(name))
        elif channel and channel.group(1) == "analysis":
            self.kind = "reasoning"
        else:
            self.kind = "content"

    def _state_body(self, final: bool) -> bool:
        """Stream a body up to its end marker."""
        stops = _BODY_END + (START, CHANNEL)
        i, m = find_first(self.buf, stops)
        end = i if i >= 0 else len(self.buf) - (0 if final else held_suffix(self.buf, stops))
        text = self.buf[:end]
        if self.kind == "call":
            assert self.args is not None
            if not (self.args.done or self.args.error):
                for ch in text:
                    if not self.args.push(ch) or self.args.done:
                        break
        elif self.kind == "reasoning":
            self.emit_reasoning(text)
        else:
            self.emit(text)
        if i < 0:
            self.buf = self.buf[end:]
            return False
        self.buf = self.buf[i + len(m) :] if m in _BODY_END else self.buf[i:]
        self._end_body()
        return True

    def _end_body(self) -> None:
        """The current body ended: close its call, expect a header."""
        if self.args is not None:
            self.args.close()
            self.args = None
        self.kind = ""
        self.state = "header"

    def _end(self) -> None:
        """Input ended: close an open call; a partial header is content if it
        is not Harmony markup."""
        if self.state == "body":
            self._end_body()
        elif self.state == "header":
            text = (self.header + self.buf).strip()
            if text and not any(text.startswith(h) for h in _HEADER_STARTS):
                self.emit(self.header + self.buf)
        self.header = ""


def grammar(tools, *, max_calls: int, lit) -> str:
    """Lark grammar forcing an optional analysis message and then one
    Harmony tool call of ``tools`` (gpt-oss ends its turn after a call, so
    ``max_calls`` has no effect)."""
    calls = []
    rules = []
    for i, tool in enumerate(tools):
        schema = args_schema(tool)
        head = lark_str(f"commentary to=functions.{tool.name} ")
        rules.append(
            f'call{i}: {lit(CHANNEL)} {head} {lit(CONSTRAIN)} "json" {lit(MESSAGE)} {json_rule(schema)} {lit(CALL)}'
        )
        calls.append(f"call{i}")
    return (
        "start: analysis? call\n"
        f'analysis: {lit(CHANNEL)} "analysis" {lit(MESSAGE)} THOUGHT {lit(END)} '
        f'{lit(START)} "assistant"\n'
        "THOUGHT: /(?s:.*)/\n"
        f"call: {' | '.join(calls)}\n" + "\n".join(rules) + "\n"
    )


FAMILY = ToolFamily(
    name="harmony",
    parser=lambda sink, tools, thinking_open: HarmonyParser(sink, tools_enabled=True, thinking_open=thinking_open),
    grammar=grammar,
    grammar_markers=(START, CHANNEL, MESSAGE, END, CALL, CONSTRAIN),
    special_markers=SPECIAL,
    detect=lambda text: CHANNEL in text,
    detect_rank=60,
    vocab_markers=(CHANNEL,),
)
"""Harmony's declaration (see :class:`~worker.parsers.family.ToolFamily`)."""
