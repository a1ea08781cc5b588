"""Building blocks of the tool-call grammars (llguidance's Lark dialect).

Family modules compose their ``grammar()`` from these: JSON schemas for
call objects and arguments embedded with ``%json``, string and regex
literals, and typed values of the tag-based families.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from worker.parsers.schema_values import schema_types


def args_schema(tool) -> dict:
    """A tool's arguments schema (any object when it has none)."""
    return dict(tool.parameters) if tool.parameters else {"type": "object"}


def call_schema(tools, arg_key: str = "arguments") -> dict:
    """JSON schema of one ``{"name": ..., "<arg_key>": {...}}`` call object of
    any of ``tools`` (name first, then arguments, nothing else)."""
    variants = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, arg_key: args_schema(t)},
            "required": ["name", arg_key],
            "additionalProperties": False,
        }
        for t in tools
    ]
    return variants[0] if len(variants) == 1 else {"anyOf": variants}


JSON_STYLE = {
    "item_separator": ", ?",
    "key_separator": ": ?",
    "whitespace_flexible": False,
    "lenient": True,
}
"""llguidance options for embedded JSON: compact or ``json.dumps`` spacing
(no runaway whitespace); unsupported schema keywords are ignored."""


def json_rule(schema: dict) -> str:
    """A Lark ``%json`` body for ``schema`` with :data:`JSON_STYLE` options."""
    return "%json " + json.dumps({"x-guidance": JSON_STYLE, **schema}, ensure_ascii=False)


def more_calls(item: str, max_calls: int) -> str:
    """Lark for the calls after the first: ``item`` (a Lark sequence for
    one more call with its separator, e.g. ``'"\\n" call'``) at most
    ``max_calls`` - 1 times, so a model cannot repeat calls until its token
    limit; empty when ``max_calls`` is 1.

    Raises:
        ValueError: ``max_calls`` is below 1.
    """
    if max_calls < 1:
        raise ValueError(f"max_calls must be at least 1, not {max_calls}")
    return f" ({item}){{0,{max_calls - 1}}}" if max_calls > 1 else ""


def lark_str(text: str) -> str:
    """``text`` as a Lark string literal."""
    return json.dumps(text, ensure_ascii=False)


def regex_literal(text: str) -> str:
    """``text`` escaped for use inside a Lark ``/.../`` regex."""
    out = []
    for ch in text:
        if ch in "\\.+*?()|[]{}^$#&-~/":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        else:
            out.append(ch)
    return "".join(out)


def value_rules(rule: str, schema: Any, end: str, lit) -> list[str]:
    """Lark rules defining ``rule`` as one parameter value followed by the
    text ``end`` (which starts with a marker rendered by ``lit``).

    Text-typed values (strings, or no known type) are any text up to the
    first ``end``; string enums are their literal alternatives; any other
    type is JSON constrained by ``schema`` (``%json``).
    """
    types = schema_types(schema)
    sub = schema if isinstance(schema, dict) else {}
    enum = sub.get("enum")
    if enum and all(isinstance(v, str) for v in enum):
        alts = " | ".join(json.dumps(v, ensure_ascii=False) for v in enum)
        return [f"{rule}: ({alts}) {_end(end, lit)}"]
    if not types or "string" in types:
        marker = _leading_marker(end)
        if lit.special(marker):
            return [f"{rule}: /(?s:.*)/ {_end(end, lit)}"]
        return [f"{rule}[lazy]: /(?s:.*){regex_literal(end)}/"]
    return [f"{rule}: {json_rule(sub)} {_end(end, lit)}"]


def argument_rules(
    tool, i: int, prefix: str, member: Callable[[str, str, str, Any], list[str]]
) -> tuple[str, list[str]]:
    """The arguments of the tag-based families, for the ``i``-th tool: the
    Lark sequence of ``tool``'s parameters in schema order (required ones
    mandatory, the others optional) and the rules defining them.

    Parameter ``j`` is rule ``{prefix}{i}_{j}`` and its value rule
    ``v{i}_{j}``; ``member(rule, value_rule, name, schema)`` returns the
    rules of one parameter (its markup, and :func:`value_rules` for the
    value).
    """
    schema = tool.parameters or {}
    props = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    rules: list[str] = []
    seq = []
    for j, (name, sub) in enumerate(props.items()):
        rule = f"{prefix}{i}_{j}"
        rules += member(rule, f"v{i}_{j}", name, sub)
        seq.append(rule if name in required else f"{rule}?")
    return " ".join(seq), rules


def _leading_marker(end: str) -> str:
    """The ``<...>`` marker ``end`` starts with (after newlines)."""
    body = end.lstrip("\n")
    stop = body.find(">")
    return body[: stop + 1] if stop >= 0 else body


def _end(end: str, lit) -> str:
    """``end`` as a Lark sequence: its leading marker rendered by ``lit``,
    the text around it as string literals."""
    lead = end[: len(end) - len(end.lstrip("\n"))]
    marker = _leading_marker(end)
    rest = end[len(lead) + len(marker) :]
    parts = []
    if lead:
        parts.append(json.dumps(lead))
    parts.append(lit(marker))
    if rest:
        parts.append(json.dumps(rest, ensure_ascii=False))
    return " ".join(parts)
