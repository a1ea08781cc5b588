"""Context-management edits (beta ``context_management.edits``) applied to
the prompt before it reaches the worker.

mlxd keeps no conversation state, so an edit is applied to the prompt of
the request that carries it, exactly as the Anthropic API applies it to the
request's context:

* ``clear_thinking_20251015`` removes the reasoning of earlier assistant
  turns, keeping that of the last ``keep.value`` turns that have any
  (default 1; ``keep: "all"`` or ``{"type": "all"}`` keeps all: a no-op).
* ``clear_tool_uses_20250919``, once ``trigger`` is reached (prompt tokens,
  default 100,000, or the number of tool uses), replaces the results of the
  oldest tool uses with :data:`CLEARED_RESULT`, keeping the last
  ``keep.value`` (default 3) and any tool named in ``exclude_tools``;
  ``clear_tool_inputs`` (true, or a list of tool names) also empties those
  calls' inputs. With ``clear_at_least`` the edit is applied only if it
  clears at least that many prompt tokens.

``compact_20260112`` (server-side summarisation) is refused by the schema.
Token counts come from the model's tokenizer through ``count`` (a worker
round trip, made only when an edit needs one). Each applied edit is
reported as the response's ``context_management.applied_edits`` entry, with
``cleared_input_tokens`` the prompt tokens it removed. Runs on the event
loop; never blocks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import msgspec

from shared.protocol import ChatMessage, ToolCall

CLEARED_RESULT = "[tool result cleared to save context]"
"""What replaces the content of a tool result cleared by
``clear_tool_uses_20250919``."""

DEFAULT_TOOL_USE_TRIGGER = 100_000
"""Prompt tokens above which ``clear_tool_uses_20250919`` acts by default."""
DEFAULT_KEPT_TOOL_USES = 3
"""Most recent tool uses ``clear_tool_uses_20250919`` keeps by default."""
DEFAULT_KEPT_THINKING_TURNS = 1
"""Most recent reasoning turns ``clear_thinking_20251015`` keeps by default."""

Counter = Callable[[list[ChatMessage]], Awaitable[int]]
"""Counts the prompt tokens of a message list (with the request's tools)."""


@dataclass(frozen=True)
class ClearThinking:
    """A ``clear_thinking_20251015`` edit: keep the reasoning of the last
    ``keep`` turns (None: all)."""

    keep: int | None


@dataclass(frozen=True)
class ClearToolUses:
    """A ``clear_tool_uses_20250919`` edit (see the module docstring)."""

    trigger_tokens: int | None
    trigger_uses: int | None
    keep: int
    clear_at_least: int
    exclude: frozenset[str]
    clear_inputs: bool | frozenset[str]


Edit = ClearThinking | ClearToolUses


def clear_thinking(messages: list[ChatMessage], keep: int) -> tuple[list[ChatMessage], int]:
    """``messages`` with the reasoning of all but the last ``keep`` assistant
    turns that have any removed, and how many turns lost theirs."""
    with_reasoning = [i for i, m in enumerate(messages) if m.role == "assistant" and m.reasoning]
    cleared = with_reasoning[: max(0, len(with_reasoning) - keep)]
    out = list(messages)
    for i in cleared:
        out[i] = msgspec.structs.replace(out[i], reasoning=None)
    return out, len(cleared)


def _tool_uses(messages: list[ChatMessage]) -> list[ToolCall]:
    """Every earlier tool call, oldest first."""
    return [call for m in messages if m.role == "assistant" for call in m.tool_calls or ()]


def clear_tool_uses(messages: list[ChatMessage], edit: ClearToolUses) -> tuple[list[ChatMessage], int]:
    """``messages`` with the oldest tool uses' results (and, as asked, their
    inputs) cleared, keeping the last ``edit.keep`` and excluded tools; and
    how many tool uses were cleared (the trigger is not checked here)."""
    uses = [call for call in _tool_uses(messages) if call.name not in edit.exclude]
    cleared = uses[: max(0, len(uses) - edit.keep)]
    ids = {call.id for call in cleared}
    inputs = edit.clear_inputs

    def empties(call: ToolCall) -> bool:
        if call.id not in ids:
            return False
        return inputs if isinstance(inputs, bool) else call.name in inputs

    out: list[ChatMessage] = []
    for m in messages:
        if m.role == "tool" and m.tool_call_id in ids:
            m = msgspec.structs.replace(m, content=CLEARED_RESULT)
        elif m.role == "assistant" and m.tool_calls and any(empties(c) for c in m.tool_calls):
            calls = [msgspec.structs.replace(c, arguments="{}") if empties(c) else c for c in m.tool_calls]
            m = msgspec.structs.replace(m, tool_calls=calls)
        out.append(m)
    return out, len(cleared)


async def apply_edits(
    messages: list[ChatMessage], edits: list[Edit], count: Counter
) -> tuple[list[ChatMessage], list[dict[str, Any]]]:
    """Apply ``edits`` in order; return the edited messages and one
    ``applied_edits`` entry per edit that changed anything."""
    applied: list[dict[str, Any]] = []
    for edit in edits:
        if isinstance(edit, ClearThinking):
            if edit.keep is None:
                continue
            edited, turns = clear_thinking(messages, edit.keep)
            if not turns:
                continue
            cleared = await count(messages) - await count(edited)
            applied.append(
                {"type": "clear_thinking_20251015", "cleared_thinking_turns": turns, "cleared_input_tokens": cleared}
            )
        else:
            before = await count(messages)
            uses = len(_tool_uses(messages))
            if edit.trigger_uses is not None:
                if uses <= edit.trigger_uses:
                    continue
            elif before <= (edit.trigger_tokens or DEFAULT_TOOL_USE_TRIGGER):
                continue
            edited, cleared_uses = clear_tool_uses(messages, edit)
            if not cleared_uses:
                continue
            cleared = before - await count(edited)
            if cleared < edit.clear_at_least:
                continue
            applied.append(
                {"type": "clear_tool_uses_20250919", "cleared_tool_uses": cleared_uses, "cleared_input_tokens": cleared}
            )
        messages = edited
    return messages, applied
