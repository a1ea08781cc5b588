"""GLM-4.5 / GLM-4.6 tool calls.

Output format::

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    <arg_key>days</arg_key>
    <arg_value>3</arg_value>
    </tool_call>

The arguments become a JSON object, each value typed by the tool's
parameter schema (as in :mod:`worker.parsers.qwen3_coder`; values are taken
verbatim) and sent as soon as its ``</arg_value>`` arrives. The single
newline before ``<tool_call>`` is dropped.
"""

from __future__ import annotations

from worker.parsers.base import find_first, held_suffix, is_marker_prefix
from worker.parsers.family import ToolFamily
from worker.parsers.lark_rules import argument_rules, lark_str, more_calls, value_rules
from worker.parsers.xml_machine import XmlToolParser

OPEN, CLOSE = "<tool_call>", "</tool_call>"
KEY, KEY_END = "<arg_key>", "</arg_key>"
VALUE, VALUE_END = "<arg_value>", "</arg_value>"
_NAME_LIMIT = 256


class Glm45Parser(XmlToolParser):
    """Streaming parser of GLM-4.5 ``<arg_key>``/``<arg_value>`` calls:
    reads the function name and the value tag; the arguments are the XML
    machine's (:class:`~worker.parsers.xml_machine.XmlToolParser`)."""

    OPENERS = (OPEN,)
    CLOSERS = (CLOSE,)
    HEAD_STATES = ("name",)
    MEMBER_TAGS = ((KEY, "key", False), (CLOSE, "content", True))
    KEY_END = KEY_END
    AFTER_KEY = "pre_value"
    VALUE_ENDS = (VALUE_END, KEY, CLOSE)

    def _open(self, marker: str, raw: str) -> None:
        """Start a call block."""
        self.raw = raw
        self.state = "name"

    def _state_name(self, final: bool) -> bool:
        """Read the function name that follows ``<tool_call>``."""
        i, m = find_first(self.buf, ("\n", KEY, CLOSE))
        end = i if i >= 0 else len(self.buf) - held_suffix(self.buf, (KEY, CLOSE))
        name = self.buf[:end].strip()
        if "<" in name or "{" in name or len(name) > _NAME_LIMIT:
            return self.give_back_block(self.raw)
        if i < 0:
            return False
        if not name:
            if m != "\n":
                return self.give_back_block(self.raw)
            self.raw += self.buf[: i + 1]
            self.buf = self.buf[i + 1 :]
            return True
        self.buf = self.buf[i + 1 :] if m == "\n" else self.buf[i:]
        return self.start_call(name)

    def _state_pre_value(self, final: bool) -> bool:
        """After an argument's key: expect ``<arg_value>``."""
        stripped = self.buf.lstrip()
        if stripped.startswith(VALUE):
            self.buf = stripped[len(VALUE) :]
            self.state = "value"
            return True
        if not stripped or is_marker_prefix(stripped, (VALUE,)):
            return False
        self.buf = stripped
        self.state = "members"
        return True


def grammar(tools, *, max_calls: int, lit) -> str:
    """Lark grammar forcing 1..``max_calls`` GLM-4.5 calls of ``tools``, each value typed by its schema (required arguments
    mandatory, in schema order)."""
    rep = more_calls('"\\n" call', max_calls)
    rules = [f"start: call{rep}"]
    fns = []

    def member(rule: str, value: str, key: str, schema) -> list[str]:
        """One ``<arg_key>`` and its typed ``<arg_value>``."""
        head = f'"\\n" {lit(KEY)} {lark_str(key)} {lit(KEY_END)} "\\n" {lit(VALUE)}'
        return [f"{rule}: {head} {value}", *value_rules(value, schema, VALUE_END, lit)]

    for i, tool in enumerate(tools):
        seq, arg_rules = argument_rules(tool, i, "a", member)
        rules += arg_rules
        rules.append(f'fn{i}: {lit(OPEN)} {lark_str(tool.name)} {seq} "\\n" {lit(CLOSE)}')
        fns.append(f"fn{i}")
    rules.append(f"call: {' | '.join(fns)}")
    return "\n".join(rules) + "\n"


FAMILY = ToolFamily(
    name="glm45",
    parser=lambda sink, tools, thinking_open: Glm45Parser(sink, tools),
    grammar=grammar,
    grammar_markers=(OPEN, CLOSE, KEY, KEY_END, VALUE, VALUE_END),
    detect=lambda text: OPEN in text and KEY in text,
    detect_rank=10,
    vocab_markers=(OPEN, KEY),
)
"""GLM-4.5's declaration (see :class:`~worker.parsers.family.ToolFamily`)."""
