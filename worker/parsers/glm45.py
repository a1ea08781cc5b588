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

from worker.parsers.base import (
    ToolCallSink,
    find_first,
    held_suffix,
    is_marker_prefix,
    tool_params,
)
from worker.parsers.family import ToolFamily
from worker.parsers.lark_rules import lark_str, more_calls, value_rules
from worker.parsers.machine import ToolTextParser
from worker.parsers.xmlargs import XmlCall

OPEN, CLOSE = "<tool_call>", "</tool_call>"
KEY, KEY_END = "<arg_key>", "</arg_key>"
VALUE, VALUE_END = "<arg_value>", "</arg_value>"
_NAME_LIMIT = 256
_VALUE_ENDS = (VALUE_END, KEY, CLOSE)
_LONGEST_END = max(map(len, _VALUE_ENDS))


class Glm45Parser(ToolTextParser):
    """Streaming parser of GLM-4.5 ``<arg_key>``/``<arg_value>`` calls."""

    OPENERS = (OPEN,)
    STRIP_NEWLINE = True

    def __init__(self, sink: ToolCallSink, tools) -> None:
        super().__init__(sink)
        self.params = tool_params(tools)
        self.call: XmlCall | None = None
        self.raw = ""
        self.key = ""
        self.scanned = 0

    def _open(self, marker: str, raw: str) -> None:
        """Start a call block."""
        self.raw = raw
        self.state = "name"

    def _step(self, final: bool) -> bool:
        """Advance one state (see the module docstring)."""
        st = self.state
        if st == "content":
            return self.content_step(final)
        if st == "name":
            return self._name()
        if st == "args":
            return self._args()
        if st == "key":
            i = self.buf.find(KEY_END)
            if i < 0:
                return False
            self.key = self.buf[:i].strip()
            self.buf = self.buf[i + len(KEY_END) :]
            self.state = "pre_value"
            return True
        if st == "pre_value":
            stripped = self.buf.lstrip()
            if stripped.startswith(VALUE):
                self.buf = stripped[len(VALUE) :]
                self.state = "value"
                return True
            if not stripped or is_marker_prefix(stripped, (VALUE,)):
                return False
            self.buf = stripped
            self.state = "args"
            return True
        if st == "value":
            i, m = find_first(self.buf, _VALUE_ENDS, self.scanned)
            if i < 0:
                # a marker may start in the last few characters only
                self.scanned = max(0, len(self.buf) - _LONGEST_END + 1)
                return False
            self.scanned = 0
            assert self.call is not None
            self.call.member(self.key, self.buf[:i])
            self.buf = self.buf[i + len(m) :] if m == VALUE_END else self.buf[i:]
            self.state = "args"
            return True
        if st == "broken":
            return self.give_back_until(final, (CLOSE,), (OPEN,))
        return False

    def _name(self) -> bool:
        """Read the function name that follows ``<tool_call>``."""
        i, m = find_first(self.buf, ("\n", KEY, CLOSE))
        end = i if i >= 0 else len(self.buf) - held_suffix(self.buf, (KEY, CLOSE))
        name = self.buf[:end].strip()
        if "<" in name or "{" in name or len(name) > _NAME_LIMIT:
            self.broken = self.raw
            self.raw = ""
            self.state = "broken"
            return True
        if i < 0:
            return False
        if not name:
            if m != "\n":
                self.broken = self.raw
                self.raw = ""
                self.state = "broken"
                return True
            self.raw += self.buf[: i + 1]
            self.buf = self.buf[i + 1 :]
            return True
        self.buf = self.buf[i + 1 :] if m == "\n" else self.buf[i:]
        self.call = XmlCall(self.sink, name, self.params.get(name, {}))
        self.raw = ""
        self.state = "args"
        return True

    def _args(self) -> bool:
        """Between arguments: the next key, or the end of the call."""
        stripped = self.buf.lstrip()
        if stripped.startswith(KEY):
            self.buf = stripped[len(KEY) :]
            self.state = "key"
            return True
        if stripped.startswith(CLOSE):
            self.buf = stripped[len(CLOSE) :]
            assert self.call is not None
            self.call.close()
            self.call = None
            self.state = "content"
            return True
        if not stripped or is_marker_prefix(stripped, (KEY, CLOSE)):
            return False
        j = stripped.find("<", 1)
        self.buf = stripped[j:] if j >= 0 else ""
        return j >= 0

    def _end(self) -> None:
        """Input ended inside a call: finish a named one, else content."""
        if self.call is not None:
            if self.state == "value":
                self.call.member(self.key, self.buf)
            self.call.close()
            self.call = None
        elif self.state == "name":
            self.emit(self.raw + self.buf)
        elif self.state == "broken":
            self.emit(self.broken + self.buf)
        self.raw = self.broken = ""


def grammar(tools, *, max_calls: int, lit) -> str:
    """Lark grammar forcing 1..``max_calls`` GLM-4.5 calls of ``tools``, each value typed by its schema (required arguments
    mandatory, in schema order)."""
    rep = more_calls('"\\n" call', max_calls)
    rules = [f"start: call{rep}"]
    fns = []
    for i, tool in enumerate(tools):
        schema = tool.parameters or {}
        props = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        seq = []
        for j, (key, sub) in enumerate(props.items()):
            rule = f"a{i}_{j}"
            rules.append(f'{rule}: "\\n" {lit(KEY)} {lark_str(key)} {lit(KEY_END)} "\\n" {lit(VALUE)} v{i}_{j}')
            rules += value_rules(f"v{i}_{j}", sub, VALUE_END, lit)
            seq.append(rule if key in required else f"{rule}?")
        rules.append(f'fn{i}: {lit(OPEN)} {lark_str(tool.name)} {" ".join(seq)} "\\n" {lit(CLOSE)}')
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
