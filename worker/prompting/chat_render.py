"""Rendering chat requests with the model's chat template.

Messages, tools, earlier tool calls and tool results are handed to the
template in the shape Hugging Face templates expect. When the template has
no tool support (it never mentions ``tools``), mlxd describes the tools in
the system prompt itself and writes earlier calls and results in the
generic ``<tool_call>`` / ``<tool_response>`` markup that its generic parser
reads back. A system message after the first turn is handed to the template
in place; when the template refuses it (many allow a system message only
first), it is folded into the next user turn instead (:func:`fold_late_system`)
and the prompt is rendered again. Templates are rendered by transformers in its sandboxed Jinja
environment. Input thread only; no MLX.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from shared.protocol import ChatMessage, Tool, ToolCall

GENERIC_TOOL_PROMPT = (
    "You can call functions to help with the user's request. "
    "These functions are available, described as JSON Schema:\n<tools>\n{tools}\n</tools>\n"
    "To call a function, answer with one JSON object per call inside tags, like this:\n"
    '<tool_call>\n{{"name": "function_name", "arguments": {{"arg": "value"}}}}\n</tool_call>'
)


def template_supports_tools(template: str | None) -> bool:
    """Whether ``template`` renders a ``tools`` list itself."""
    return bool(template) and "tools" in template  # type: ignore[operator]


def tool_dicts(tools: list[Tool]) -> list[dict[str, Any]]:
    """``tools`` in the OpenAI function shape templates iterate over."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]


def _arguments(call: ToolCall) -> Any:
    try:
        return json.loads(call.arguments)
    except ValueError:
        return call.arguments


def native_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Messages for a template with tool support (tool calls and results as
    structured fields)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        d: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.name:
            d["name"] = m.name
        if m.reasoning:
            d["reasoning_content"] = m.reasoning
        if m.tool_calls:
            d["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _arguments(c)}}
                for c in m.tool_calls
            ]
        if m.tool_call_id:
            d["tool_call_id"] = m.tool_call_id
        out.append(d)
    return out


def generic_messages(messages: list[ChatMessage], tools: list[Tool] | None) -> list[dict[str, Any]]:
    """Messages for a template without tool support: tools described in the
    system prompt, calls and results written as markup in plain turns."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            text = f"<tool_response>\n{m.content}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1].get("_tool"):
                out[-1]["content"] += "\n" + text
            else:
                out.append({"role": "user", "content": text, "_tool": True})
            continue
        content = m.content
        for call in m.tool_calls or []:
            body = json.dumps({"name": call.name, "arguments": _arguments(call)}, ensure_ascii=False)
            content += f"\n<tool_call>\n{body}\n</tool_call>"
        out.append({"role": m.role, "content": content.strip() if m.tool_calls else content})
    for d in out:
        d.pop("_tool", None)
    if tools:
        described = "\n".join(json.dumps(t, ensure_ascii=False) for t in tool_dicts(tools))
        prompt = GENERIC_TOOL_PROMPT.format(tools=described)
        if out and out[0]["role"] == "system":
            out[0]["content"] = out[0]["content"] + "\n\n" + prompt
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out


SYSTEM_FOLD = "System: {text}\n\n{content}"
"""How a folded late system message prefixes the user turn it joins."""


def fold_late_system(messages: list[ChatMessage]) -> list[ChatMessage]:
    """``messages`` with every system message after the first one folded
    into the next user message (prefixed as :data:`SYSTEM_FOLD`), or, when no
    user message follows, appended to the last user message before it. A
    late system message with no user message to join is kept."""
    out = list(messages)
    index = 1
    while index < len(out):
        if out[index].role != "system":
            index += 1
            continue
        text = out[index].content
        after = next((i for i in range(index + 1, len(out)) if out[i].role == "user"), None)
        before = next((i for i in range(index - 1, -1, -1) if out[i].role == "user"), None)
        if after is not None:
            target = out[after]
            out[after] = msgspec.structs.replace(target, content=SYSTEM_FOLD.format(text=text, content=target.content))
        elif before is not None:
            target = out[before]
            out[before] = msgspec.structs.replace(target, content=f"{target.content}\n\nSystem: {text}")
        else:
            index += 1
            continue
        del out[index]
    return out


def render(
    tokenizer: Any,
    messages: list[ChatMessage],
    *,
    tools: list[Tool] | None,
    thinking: bool | None,
    generation_prompt: bool = True,
) -> str:
    """The prompt text for a chat request, ending with the generation prompt
    (unless ``generation_prompt`` is False).

    ``tools`` None means no tools are offered. ``thinking`` is passed to the
    template as ``enable_thinking`` when set.

    A late system message the template refuses is folded (see
    :func:`fold_late_system`) and the prompt rendered again.

    Raises:
        Exception: whatever the template raises (the caller reports it as an
            invalid request).
    """
    try:
        return _render(tokenizer, messages, tools=tools, thinking=thinking, generation_prompt=generation_prompt)
    except Exception:
        folded = fold_late_system(messages)
        if folded == messages:
            raise
        return _render(tokenizer, folded, tools=tools, thinking=thinking, generation_prompt=generation_prompt)


def _render(
    tokenizer: Any,
    messages: list[ChatMessage],
    *,
    tools: list[Tool] | None,
    thinking: bool | None,
    generation_prompt: bool = True,
) -> str:
    """Render ``messages`` with the template once (see :func:`render`)."""
    template = getattr(tokenizer, "chat_template", None)
    kwargs: dict[str, Any] = {}
    if thinking is not None:
        kwargs["enable_thinking"] = thinking
    if template_supports_tools(template):
        rendered_messages = native_messages(messages)
        if tools:
            kwargs["tools"] = tool_dicts(tools)
    else:
        rendered_messages = generic_messages(messages, tools)
    return tokenizer.apply_chat_template(
        rendered_messages, add_generation_prompt=generation_prompt, tokenize=False, **kwargs
    )
