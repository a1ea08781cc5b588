"""Qwen3-Coder XML-style tool calls.

Output format::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    <parameter=days>
    3
    </parameter>
    </function>
    </tool_call>

The arguments become a JSON object, each value typed by the tool's
parameter schema (number, integer, boolean, object and array values are
parsed as JSON, everything else is a string) and sent as soon as its
parameter is complete. One newline right after ``<parameter=...>`` and one
right before ``</parameter>`` are part of the markup. A missing
``</parameter>`` is tolerated (the value ends at the next tag), and so is a
call that starts at ``<function=`` without ``<tool_call>``. The single
newline before the opening tag is dropped.
"""

from __future__ import annotations

from worker.parsers.base import is_marker_prefix
from worker.parsers.family import ToolFamily
from worker.parsers.lark_rules import argument_rules, lark_str, more_calls, value_rules
from worker.parsers.xml_machine import XmlToolParser

OPEN, CLOSE = "<tool_call>", "</tool_call>"
FUNC, FUNC_END = "<function=", "</function>"
PARAM, PARAM_END = "<parameter=", "</parameter>"
_NAME_LIMIT = 256


class Qwen3CoderParser(XmlToolParser):
    """Streaming parser of Qwen3-Coder ``<function=...>`` calls: reads the
    block and function name; the arguments are the XML machine's
    (:class:`~worker.parsers.xml_machine.XmlToolParser`)."""

    OPENERS = (OPEN, FUNC)
    CLOSERS = (CLOSE,)
    HEAD_STATES = ("block", "fname")
    MEMBER_TAGS = ((PARAM, "key", False), (FUNC_END, "after", True), (CLOSE, "content", True))
    KEY_END = ">"
    VALUE_ENDS = (PARAM_END, PARAM, FUNC_END, CLOSE)

    def _open(self, marker: str, raw: str) -> None:
        """Start a call at ``<tool_call>`` or directly at ``<function=``."""
        self.raw = raw
        self.state = "block" if marker == OPEN else "fname"

    def _state_block(self, final: bool) -> bool:
        """After ``<tool_call>``: expect ``<function=``."""
        stripped = self.buf.lstrip()
        if stripped.startswith(FUNC):
            self.raw += self.buf[: len(self.buf) - len(stripped) + len(FUNC)]
            self.buf = stripped[len(FUNC) :]
            self.state = "fname"
            return True
        if not stripped or is_marker_prefix(stripped, (FUNC,)):
            return False
        return self.give_back_block(self.raw)

    def _state_fname(self, final: bool) -> bool:
        """The function name, up to ``>``."""
        i = self.buf.find(">")
        written = self.buf[:i] if i >= 0 else self.buf
        name = written.strip()
        bad = "\n" in written or "<" in written or len(written) > _NAME_LIMIT
        if bad or (i >= 0 and not name):
            return self.give_back_block(self.raw)
        if i < 0:
            return False
        self.buf = self.buf[i + 1 :]
        return self.start_call(name)

    def _state_after(self, final: bool) -> bool:
        """After ``</function>``: an optional ``</tool_call>`` (even when
        the call started at ``<function=``)."""
        return self.skip_marker(final, CLOSE, "content", keep_space=True)

    def _member(self, text: str) -> None:
        """Send one parameter, dropping the newline after and before its tags."""
        if text.startswith("\n"):
            text = text[1:]
        if text.endswith("\n"):
            text = text[:-1]
        super()._member(text)


def grammar(tools, *, max_calls: int, lit) -> str:
    """Lark grammar forcing 1..``max_calls`` Qwen3-Coder calls of ``tools``, each parameter's value typed by its schema
    (required parameters mandatory, in schema order)."""
    rep = more_calls('"\\n" call', max_calls)
    rules = [f"start: call{rep}"]
    fns = []

    def member(rule: str, value: str, name: str, schema) -> list[str]:
        """One ``<parameter=name>`` and its typed value."""
        head = lark_str(name + ">\n")
        return [f"{rule}: {lit(PARAM)} {head} {value}", *value_rules(value, schema, "\n" + PARAM_END + "\n", lit)]

    for i, tool in enumerate(tools):
        body, arg_rules = argument_rules(tool, i, "p", member)
        rules += arg_rules
        head = lark_str(tool.name + ">\n")
        rules.append(f'fn{i}: {lit(FUNC)} {head} {body} {lit(FUNC_END)} "\\n"')
        fns.append(f"fn{i}")
    rules.append(f'call: {lit(OPEN)} "\\n" ({" | ".join(fns)}) {lit(CLOSE)}')
    return "\n".join(rules) + "\n"


FAMILY = ToolFamily(
    name="qwen3_coder",
    parser=lambda sink, tools, thinking_open: Qwen3CoderParser(sink, tools),
    grammar=grammar,
    grammar_markers=(OPEN, CLOSE),
    detect=lambda text: FUNC in text,
    detect_rank=20,
    vocab_markers=(FUNC,),
)
"""Qwen3-Coder's declaration (see :class:`~worker.parsers.family.ToolFamily`)."""
