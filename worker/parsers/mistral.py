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

from worker.parsers.base import find_first, held_suffix
from worker.parsers.family import ToolFamily
from worker.parsers.json_args import ArgStream
from worker.parsers.json_calls import CallList, CallObject
from worker.parsers.lark_rules import args_schema, call_schema, json_rule, lark_str, more_calls
from worker.parsers.machine import ToolTextParser

TOOL_CALLS, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
_NAME_LIMIT = 256


class MistralParser(ToolTextParser):
    """Streaming parser of ``[TOOL_CALLS]`` calls (see the module): decides
    the form, reads ``name[ARGS]``; the JSON forms and the arguments are the
    machine's ``json`` and ``args`` states."""

    OPENERS = (TOOL_CALLS,)
    HEAD_STATES = ("after_tc", "name")

    def _open(self, marker: str, raw: str) -> None:
        """After ``[TOOL_CALLS]``: decide the form from what follows."""
        self.raw = raw
        self.state = "after_tc"

    def _state_after_tc(self, final: bool) -> bool:
        """The first character after ``[TOOL_CALLS]`` picks the form."""
        stripped = self.take_space_into_raw()
        if not stripped:
            return False
        if stripped[0] == "[":
            self.obj = CallList(self.sink)
            self.state = "json"
        elif stripped[0] == "{":
            self.obj = CallObject(self.sink)
            self.state = "json"
        else:
            self.state = "name"
        return True

    def _state_name(self, final: bool) -> bool:
        """Read ``name[ARGS]`` (or ``name[CALL_ID]``)."""
        i, m = find_first(self.buf, (ARGS, CALL_ID))
        end = i if i >= 0 else len(self.buf) - held_suffix(self.buf, (ARGS, CALL_ID))
        name = self.buf[:end]
        if len(name) > _NAME_LIMIT or any(c in name for c in " \t\n{[\"'"):
            return self.give_back(self.raw)
        if i < 0:
            return False
        if not name:
            return self.give_back(self.raw)
        self.buf = self.buf[i + len(m) :]
        index = self.sink.open(name)
        self.raw = ""
        self.args = ArgStream(self.sink, index)
        self.state = "call_id" if m == CALL_ID else "args"
        return True

    def _state_call_id(self, final: bool) -> bool:
        """Skip a ``[CALL_ID]`` up to ``[ARGS]`` (mlxd issues its own ids)."""
        i = self.buf.find(ARGS)
        if i < 0:
            self.buf = self.buf[len(self.buf) - held_suffix(self.buf, (ARGS,)) :]
            return False
        self.buf = self.buf[i + len(ARGS) :]
        self.state = "args"
        return True


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
