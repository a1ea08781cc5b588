"""OpenAI ``custom`` tools (free-form text input) as the model sees them.

A custom tool takes one free-form string rather than JSON arguments,
optionally described by a Lark or regex grammar. Chat templates and tool
parsers only know functions, so mlxd offers a custom tool as a function of
the same name with one string argument, :data:`CUSTOM_INPUT`
(:func:`custom_tool`); the description says so and, for a grammar, carries
the grammar's text (described to the model, not enforced). The call the
model makes is turned back into the tool's input with :func:`custom_input`,
and an earlier call in the history into arguments with
:func:`custom_arguments`. Used by the Responses API
(:mod:`gateway.responses.tools`) and chat completions
(:mod:`gateway.openai.translate`).
"""

from __future__ import annotations

import json
from typing import Any

from shared.protocol import Tool

CUSTOM_INPUT = "input"
"""The one argument of the function a custom tool becomes."""

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {CUSTOM_INPUT: {"type": "string"}},
    "required": [CUSTOM_INPUT],
    "additionalProperties": False,
}


def custom_tool(name: str, description: str | None, syntax: str | None, definition: str | None) -> Tool:
    """The function the model sees for custom tool ``name``; ``syntax``
    and ``definition`` describe its grammar (None: free-form text)."""
    parts = [description] if description else []
    if syntax is not None and definition is not None:
        parts.append(
            f"Call it with one string argument, '{CUSTOM_INPUT}', whose text must match this "
            f"{syntax} grammar:\n{definition}"
        )
    else:
        parts.append(f"Call it with one string argument, '{CUSTOM_INPUT}': free-form text.")
    return Tool(name=name, description="\n\n".join(parts), parameters=json.loads(json.dumps(_PARAMETERS)))


def custom_input(arguments: str) -> str:
    """The free-form input of a custom tool call from the arguments the
    model gave its function form (``{"input": ...}``); the arguments
    themselves when they are not that shape."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get(CUSTOM_INPUT), str):
        return value[CUSTOM_INPUT]
    return arguments


def custom_arguments(text: str) -> str:
    """The function-form arguments (JSON text) of a custom call whose
    input was ``text``."""
    return json.dumps({CUSTOM_INPUT: text}, ensure_ascii=False)
