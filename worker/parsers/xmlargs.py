"""Building a call's arguments object member by member, for the families
that write arguments as tagged key/value pairs (``qwen3_coder``, ``glm45``).
"""

from __future__ import annotations

import json
from typing import Any

from worker.parsers.base import ToolCallSink, coerce_value


class XmlCall:
    """One call whose arguments arrive as separate ``key``/text pairs.

    Opening sends the name and ``{``; :meth:`member` types a value by the
    parameter's schema (``props`` maps parameter names to schemas) and sends
    ``"key": value``; :meth:`close` sends ``}`` and closes the call, so the
    fragments always concatenate to one JSON object.
    """

    def __init__(self, sink: ToolCallSink, name: str, props: dict[str, Any]) -> None:
        self.sink = sink
        self.props = props
        self.count = 0
        self.index = sink.open(name, "{")

    def member(self, key: str, text: str) -> None:
        """Send one parameter."""
        value = coerce_value(text, self.props.get(key))
        sep = ", " if self.count else ""
        self.count += 1
        self.sink.append(
            self.index,
            f"{sep}{json.dumps(key, ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}",
        )

    def close(self) -> None:
        """Send the closing brace and close the call."""
        self.sink.append(self.index, "}")
        self.sink.close(self.index)
