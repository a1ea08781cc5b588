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

from worker.parsers.base import ToolCallSink, find_first, is_marker_prefix, tool_params
from worker.parsers.family import ToolFamily
from worker.parsers.lark_rules import lark_str, more_calls, value_rules
from worker.parsers.machine import ToolTextParser
from worker.parsers.xmlargs import XmlCall

OPEN, CLOSE = "<tool_call>", "</tool_call>"
FUNC, FUNC_END = "<function=", "</function>"
PARAM, PARAM_END = "<parameter=", "</parameter>"
_NAME_LIMIT = 256
_VALUE_ENDS = (PARAM_END, PARAM, FUNC_END, CLOSE)
_LONGEST_END = max(map(len, _VALUE_ENDS))


class Qwen3CoderParser(ToolTextParser):
    """Streaming parser of Qwen3-Coder ``<function=...>`` calls."""

    OPENERS = (OPEN, FUNC)
    STRIP_NEWLINE = True

    def __init__(self, sink: ToolCallSink, tools) -> None:
        super().__init__(sink)
        self.params = tool_params(tools)
        self.call: XmlCall | None = None
        self.raw = ""
        self.pname = ""
        self.scanned = 0

    def _open(self, marker: str, raw: str) -> None:
        """Start a call at ``<tool_call>`` or directly at ``<function=``."""
        self.raw = raw
        self.state = "block" if marker == OPEN else "fname"

    def _give_back(self) -> bool:
        """Not a call: the markup read so far goes back to content."""
        self.broken = self.raw
        self.raw = ""
        self.state = "broken"
        return True

    def _step(self, final: bool) -> bool:
        """Advance one state (see the module docstring)."""
        st = self.state
        if st == "content":
            return self.content_step(final)
        if st == "block":
            stripped = self.buf.lstrip()
            if stripped.startswith(FUNC):
                self.raw += self.buf[: len(self.buf) - len(stripped) + len(FUNC)]
                self.buf = stripped[len(FUNC) :]
                self.state = "fname"
                return True
            if not stripped or is_marker_prefix(stripped, (FUNC,)):
                return False
            return self._give_back()
        if st == "fname":
            i = self.buf.find(">")
            written = self.buf[:i] if i >= 0 else self.buf
            name = written.strip()
            bad = "\n" in written or "<" in written or len(written) > _NAME_LIMIT
            if bad or (i >= 0 and not name):
                return self._give_back()
            if i < 0:
                return False
            self.buf = self.buf[i + 1 :]
            self.call = XmlCall(self.sink, name, self.params.get(name, {}))
            self.raw = ""
            self.state = "params"
            return True
        if st == "params":
            return self._params(final)
        if st == "pname":
            i = self.buf.find(">")
            if i < 0:
                return False
            self.pname = self.buf[:i].strip()
            self.buf = self.buf[i + 1 :]
            self.state = "pvalue"
            return True
        if st == "pvalue":
            i, m = find_first(self.buf, _VALUE_ENDS, self.scanned)
            if i < 0:
                # a marker may start in the last few characters only
                self.scanned = max(0, len(self.buf) - _LONGEST_END + 1)
                return False
            self.scanned = 0
            self._member(self.buf[:i])
            self.buf = self.buf[i + len(m) :] if m == PARAM_END else self.buf[i:]
            self.state = "params"
            return True
        if st == "after":
            # after </function>: an optional </tool_call> (even when the call
            # started at <function=)
            stripped = self.buf.lstrip()
            if stripped.startswith(CLOSE):
                self.buf = stripped[len(CLOSE) :]
                self.state = "content"
                return True
            if not stripped or is_marker_prefix(stripped, (CLOSE,)):
                if final:
                    self.buf = ""
                return False
            self.state = "content"
            return True
        if st == "broken":
            return self.give_back_until(final, (CLOSE,), (OPEN, FUNC))
        return False

    def _params(self, final: bool) -> bool:
        """Between parameters: the next tag, or the end of the function."""
        stripped = self.buf.lstrip()
        assert self.call is not None
        if stripped.startswith(PARAM):
            self.buf = stripped[len(PARAM) :]
            self.state = "pname"
            return True
        if stripped.startswith(FUNC_END):
            self.buf = stripped[len(FUNC_END) :]
            self._close()
            self.state = "after"
            return True
        if stripped.startswith(CLOSE):
            self.buf = stripped[len(CLOSE) :]
            self._close()
            self.state = "content"
            return True
        if not stripped or is_marker_prefix(stripped, (PARAM, FUNC_END, CLOSE)):
            return False
        j = stripped.find("<", 1)
        self.buf = stripped[j:] if j >= 0 else ""
        return j >= 0

    def _member(self, text: str) -> None:
        """Send one parameter, dropping the newline after and before its tags."""
        if text.startswith("\n"):
            text = text[1:]
        if text.endswith("\n"):
            text = text[:-1]
        assert self.call is not None
        self.call.member(self.pname, text)

    def _close(self) -> None:
        """Close the current call."""
        assert self.call is not None
        self.call.close()
        self.call = None

    def _end(self) -> None:
        """Input ended inside a call: finish a named one, else content."""
        st = self.state
        if self.call is not None:
            if st == "pvalue":
                self._member(self.buf)
            self._close()
        elif st in ("block", "fname"):
            self.emit(self.raw + self.buf)
        elif st == "broken":
            self.emit(self.broken + self.buf)
        self.raw = self.broken = ""


def grammar(tools, *, max_calls: int, lit) -> str:
    """Lark grammar forcing 1..``max_calls`` Qwen3-Coder calls of ``tools``, each parameter's value typed by its schema
    (required parameters mandatory, in schema order)."""
    rep = more_calls('"\\n" call', max_calls)
    rules = [f"start: call{rep}"]
    fns = []
    for i, tool in enumerate(tools):
        schema = tool.parameters or {}
        props = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        seq = []
        for j, (pname, psub) in enumerate(props.items()):
            rule = f"p{i}_{j}"
            head = lark_str(pname + ">\n")
            rules.append(f"{rule}: {lit(PARAM)} {head} v{i}_{j}")
            rules += value_rules(f"v{i}_{j}", psub, "\n" + PARAM_END + "\n", lit)
            seq.append(rule if pname in required else f"{rule}?")
        body = " ".join(seq)
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
