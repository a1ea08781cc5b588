"""Mistral tool calls, both generations.

- Older tokenizers (v3-v7): ``[TOOL_CALLS][{"name": "f", "arguments":
  {...}}, ...]`` (a single object without the brackets is accepted too).
- Newer tokenizers (v11+): ``[TOOL_CALLS]f[ARGS]{...}``, repeated for more
  calls; an optional ``[CALL_ID]id`` before ``[ARGS]`` is skipped (mlxd
  issues its own ids).

Which one is decided from the first character after ``[TOOL_CALLS]``:
``[`` or ``{`` means JSON, anything else a function name. Content before
and after calls is kept exactly; markup that turns out not to be a call
goes out as content.
"""

from __future__ import annotations

from worker.parsers.base import ToolCallSink, find_first, held_suffix
from worker.parsers.family import ToolFamily
from worker.parsers.json_args import ArgStream
from worker.parsers.json_calls import CallList, CallObject
from worker.parsers.lark_rules import args_schema, call_schema, json_rule, lark_str, more_calls
from worker.parsers.machine import ToolTextParser

TOOL_CALLS, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
_NAME_LIMIT = 256


class MistralParser(ToolTextParser):
    """Streaming parser of ``[TOOL_CALLS]`` calls (see the module)."""

    OPENERS = (TOOL_CALLS,)

    def __init__(self, sink: ToolCallSink) -> None:
        super().__init__(sink)
        self.raw = ""
        self.parser: CallObject | CallList | None = None
        self.args: ArgStream | None = None

    def _open(self, marker: str, raw: str) -> None:
        """After ``[TOOL_CALLS]``: decide the form from what follows."""
        self.raw = raw
        self.state = "after_tc"

    def _give_back(self, text: str) -> bool:
        """Not a call: ``text`` goes out as content."""
        self.emit(text)
        self.raw = ""
        self.parser = None
        self.state = "content"
        return True

    def _step(self, final: bool) -> bool:
        """Advance one state (see the module docstring)."""
        st = self.state
        if st == "content":
            return self.content_step(final)
        if st == "after_tc":
            stripped = self.buf.lstrip()
            if not stripped:
                return False
            self.raw += self.buf[: len(self.buf) - len(stripped)]
            self.buf = stripped
            if stripped[0] == "[":
                self.parser = CallList(self.sink)
                self.state = "json"
            elif stripped[0] == "{":
                self.parser = CallObject(self.sink)
                self.state = "json"
            else:
                self.state = "name"
            return True
        if st == "json":
            assert self.parser is not None
            self.pump(self.parser.push)
            if self.parser.status == "parsing":
                return False
            if self.parser.status == "invalid" and not self.parser.committed:
                return self._give_back(self.raw + "".join(self.parser.raw))
            self.parser = None
            self.raw = ""
            self.state = "content"
            return True
        if st == "name":
            return self._name()
        if st == "call_id":
            i = self.buf.find(ARGS)
            if i < 0:
                self.buf = self.buf[len(self.buf) - held_suffix(self.buf, (ARGS,)) :]
                return False
            self.buf = self.buf[i + len(ARGS) :]
            self.state = "args"
            return True
        if st == "args":
            assert self.args is not None
            self.pump(self.args.push)
            if self.args.done or self.args.error:
                self.args.close()
                self.args = None
                self.state = "content"
                return True
            return False
        return False

    def _name(self) -> bool:
        """Read ``name[ARGS]`` (or ``name[CALL_ID]``)."""
        i, m = find_first(self.buf, (ARGS, CALL_ID))
        end = i if i >= 0 else len(self.buf) - held_suffix(self.buf, (ARGS, CALL_ID))
        name = self.buf[:end]
        if len(name) > _NAME_LIMIT or any(c in name for c in " \t\n{[\"'"):
            return self._give_back(self.raw)
        if i < 0:
            return False
        if not name:
            return self._give_back(self.raw)
        self.buf = self.buf[i + len(m) :]
        index = self.sink.open(name)
        self.raw = ""
        self.args = ArgStream(self.sink, index)
        self.state = "call_id" if m == CALL_ID else "args"
        return True

    def _end(self) -> None:
        """Input ended inside a call: close a named one, else content."""
        st = self.state
        if st == "json" and self.parser is not None:
            if not self.parser.close():
                self.emit(self.raw + "".join(self.parser.raw) + self.buf)
        elif st in ("args", "call_id") and self.args is not None:
            self.args.close()
        elif st in ("after_tc", "name"):
            self.emit(self.raw + self.buf)
        self.raw = ""


def grammar(tools, *, max_calls: int, lit) -> str:
    """Lark grammar forcing 1..``max_calls`` Mistral calls of ``tools`` in
    either generation's form: ``[TOOL_CALLS]`` and a JSON array of call
    objects, or ``[TOOL_CALLS]name[ARGS]{...}`` (repeated)."""
    one = call_schema(tools)
    array = {"type": "array", "items": one, "minItems": 1, "maxItems": max_calls}
    named = []
    rules = []
    for i, tool in enumerate(tools):
        schema = args_schema(tool)
        rules.append(f"args{i}: {json_rule(schema)}")
        named.append(f"{lark_str(tool.name)} {lit(ARGS)} args{i}")
    rep = more_calls("tc named", max_calls)
    return (
        f"start: tc ({json_rule(array)} | named{rep})\n"
        f"tc: {lit(TOOL_CALLS)}\n"
        f"named: {' | '.join(named)}\n" + "\n".join(rules) + "\n"
    )


FAMILY = ToolFamily(
    name="mistral",
    parser=lambda sink, tools, thinking_open: MistralParser(sink),
    grammar=grammar,
    grammar_markers=(TOOL_CALLS, ARGS),
    detect=lambda text: TOOL_CALLS in text,
    detect_rank=40,
    vocab_markers=(TOOL_CALLS,),
)
"""Mistral's declaration (see :class:`~worker.parsers.family.ToolFamily`)."""
