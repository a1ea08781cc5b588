"""Translating a validated Anthropic Messages request into the worker's
:class:`~shared.protocol.GenerateRequest`.

The prompt: the system text (top-level ``system`` and leading system turns)
first, later system turns in place, user turns split into one ``tool``
message per tool result and one ``user`` message for the rest, assistant
turns with their reasoning and tool calls; readable blocks (documents,
search results, tool references, compaction summaries) become text; a
user turn's ``image`` blocks go to the model as images (a model without
vision refuses them later, :mod:`gateway.images.request`), and so does an
image in a tool result for a vision model, while for other models it
becomes :data:`IMAGE_PLACEHOLDER` (or a 400, per
``server.tool_result_images``); redacted thinking is left out. The rest:
sampling, tools (:func:`gateway.anthropic.checks.tool_set`), reasoning on or
off with a budget (``budget_tokens``, or the effort's share of
``max_tokens``: :data:`EFFORT_BUDGET_SHARE`), a JSON-schema response format
from ``output_config.format``, and the context-management edits
(:func:`context_edits`, applied by the routes). Pure functions; no I/O.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.anthropic.checks import blocks_of, edits_of, no_vision, prefilled, reasoning_on, text_of, tool_set
from gateway.anthropic.context import (
    DEFAULT_KEPT_THINKING_TURNS,
    DEFAULT_KEPT_TOOL_USES,
    ClearThinking,
    ClearToolUses,
    Edit,
)
from gateway.anthropic.schema import (
    ClearThinkingEdit,
    ClearToolUsesEdit,
    CompactionBlock,
    DocumentBlock,
    Effort,
    ImageBlock,
    KeepThinkingTurns,
    MessageParam,
    MessagesRequest,
    PlainTextSource,
    PromptFields,
    SearchResultBlock,
    TextBlock,
    ThinkingBlock,
    ThinkingDisabled,
    ThinkingEnabled,
    TokensTrigger,
    ToolChoiceAny,
    ToolChoiceAuto,
    ToolChoiceNone,
    ToolChoiceTool,
    ToolReferenceBlock,
    ToolResultBlock,
    ToolUseBlock,
    ToolUsesTrigger,
)
from gateway.images.parts import anthropic_image_source, image_part
from shared.protocol import (
    ChatMessage,
    GenerateRequest,
    ImagePart,
    ResponseFormat,
    SamplingParams,
    ToolCall,
    ToolChoice,
)

TOOL_ERROR_PREFIX = "Error: "
"""What starts the content of a tool result sent with ``is_error: true``, so
the model sees that the tool failed (the worker's tool turns carry text only)."""
IMAGE_PLACEHOLDER = "[image omitted: this model cannot see images]"
"""What replaces an image inside a tool result when the server's
``tool_result_images`` is ``placeholder`` (the default) and the model has
no vision."""
EFFORT_BUDGET_SHARE: dict[str, float | None] = {"low": 0.125, "medium": 0.25, "high": 0.5, "xhigh": 0.75, "max": None}
"""Reasoning budget per ``output_config.effort``, as a share of
``max_tokens`` (None: no cap beyond ``max_tokens``)."""
DEFAULT_EFFORT: Effort = "high"
"""The effort of adaptive thinking when the request names none (as in the
Anthropic API)."""

_encoder = msgspec.json.Encoder()


def _document_text(block: DocumentBlock) -> str:
    """A (checked) text document as text: its title, context and body."""
    source = block.source
    if isinstance(source, PlainTextSource):
        body = source.data
    else:
        content = source.content  # type: ignore[union-attr]
        body = content if isinstance(content, str) else text_of([b for b in content if isinstance(b, TextBlock)])
    head = "\n".join(part for part in (block.title, block.context) if part)
    return f"{head}\n\n{body}" if head else body


def _search_result_text(block: SearchResultBlock) -> str:
    """A search result as text: title, source, then its text."""
    return f"{block.title}\n{block.source}\n\n{text_of(block.content)}"


def _block_text(block: Any, images: str, path: str) -> str:
    """The text a readable block contributes to the prompt.

    Raises:
        APIError: 400 for an image when ``images`` is ``refuse``.
    """
    if isinstance(block, TextBlock):
        return block.text
    if isinstance(block, DocumentBlock):
        return _document_text(block)
    if isinstance(block, SearchResultBlock):
        return _search_result_text(block)
    if isinstance(block, ToolReferenceBlock):
        return f"Tool: {block.tool_name}"
    if isinstance(block, CompactionBlock):
        return block.content or ""
    if isinstance(block, ImageBlock):
        if images == "refuse":
            raise no_vision(f"{path}.type")
        return IMAGE_PLACEHOLDER
    return ""


def _joined(items: list[tuple[Any, str]], images: str) -> tuple[str, list[ImagePart] | None]:
    """The text of readable ``(block, path)`` items: consecutive text blocks
    concatenated, every other block on a line of its own; and the images
    that go to the model (when ``images`` is ``vision``), each placed on
    its own line.

    Raises:
        APIError: 400 for an image when ``images`` is ``refuse``, or a bad
            image source (:func:`gateway.images.parts.anthropic_image_source`).
    """
    text = ""
    pictures: list[ImagePart] = []
    previous: Any = None
    for block, path in items:
        if text and not (isinstance(block, TextBlock) and isinstance(previous, TextBlock)):
            text += "\n"
        if isinstance(block, ImageBlock) and images == "vision":
            source = anthropic_image_source(block.source, f"{path}.source")
            pictures.append(image_part(source, len(text), f"{path}.source"))
        else:
            text += _block_text(block, images, path)
        previous = block
    return text, pictures or None


def _tool_result_message(block: ToolResultBlock, names: dict[str, str], images: str, path: str) -> ChatMessage:
    """The ``tool`` turn for one tool result (``name`` from its tool use).

    Raises:
        APIError: 400 for an image when ``images`` is ``refuse``.
    """
    content = block.content
    pictures = None
    if content is None or isinstance(content, str):
        text = content or ""
    else:
        text, pictures = _joined([(item, f"{path}.content[{number}]") for number, item in enumerate(content)], images)
    if block.is_error:
        text = TOOL_ERROR_PREFIX + text
        if pictures:
            shift = len(TOOL_ERROR_PREFIX)
            pictures = [msgspec.structs.replace(p, offset=p.offset + shift) for p in pictures]
    return ChatMessage(
        role="tool", content=text, tool_call_id=block.tool_use_id, name=names.get(block.tool_use_id), images=pictures
    )


def _user_messages(message: MessageParam, names: dict[str, str], images: str, path: str) -> list[ChatMessage]:
    """A user turn: one ``tool`` message per tool result, in order, then one
    ``user`` message with the rest (when there is any or no tool results).

    Raises:
        APIError: 400 for an image in a tool result when ``images`` is
        ``refuse``.
    """
    if isinstance(message.content, str):
        return [ChatMessage(role="user", content=message.content)]
    numbered = [(block, f"{path}.content[{number}]") for number, block in enumerate(blocks_of(message))]
    out = [_tool_result_message(b, names, images, at) for b, at in numbered if isinstance(b, ToolResultBlock)]
    rest = [(b, at) for b, at in numbered if not isinstance(b, ToolResultBlock)]
    if rest or not out:
        text, pictures = _joined(rest, "vision")  # a turn's own images always go to the model
        out.append(ChatMessage(role="user", content=text, images=pictures))
    return out


def _assistant_message(message: MessageParam, names: dict[str, str]) -> ChatMessage:
    """An assistant turn: text (and compaction summaries), reasoning
    (thinking blocks; redacted ones left out) and tool calls (``arguments``
    the JSON text of ``input``); records tool names by id."""
    if isinstance(message.content, str):
        return ChatMessage(role="assistant", content=message.content)
    blocks = blocks_of(message)
    calls = [
        ToolCall(id=b.id, name=b.name, arguments=_encoder.encode(b.input).decode())
        for b in blocks
        if isinstance(b, ToolUseBlock)
    ]
    names.update((call.id, call.name) for call in calls)
    reasoning = "".join(b.thinking for b in blocks if isinstance(b, ThinkingBlock))
    text = "".join(_block_text(b, "refuse", "") for b in blocks if isinstance(b, (TextBlock, CompactionBlock)))
    return ChatMessage(role="assistant", content=text, tool_calls=calls or None, reasoning=reasoning or None)


def _system_text(message: MessageParam) -> str:
    """A system turn's text."""
    return text_of(message.content)  # type: ignore[arg-type]  # checked: text only


def _shown_system(messages: list[MessageParam], index: int) -> bool:
    """Whether system turn ``index`` reaches the model: not when it has no
    text, nor when it is cleared at the next user turn and one follows."""
    message = messages[index]
    if not _system_text(message):
        return False
    if message.clear_at == "next_user_message":
        return not any(later.role == "user" for later in messages[index + 1 :])
    return True


def chat_messages(req: PromptFields, images: str = "placeholder") -> list[ChatMessage]:
    """The worker's messages for a validated request.

    The system text (top-level ``system`` and any system turns before the
    first user or assistant turn, joined by blank lines) is a leading
    ``system`` message when not empty; later system turns stay ``system``
    messages in place (the worker folds them into the next user turn when the
    chat template refuses them); every other turn is translated (see
    :func:`_user_messages` and :func:`_assistant_message`). ``images``
    (``vision``: the model takes images; else ``placeholder`` or
    ``refuse``) decides what an image in a tool result becomes.

    Raises:
        APIError: 400 for an image in a tool result when ``images`` is
        ``refuse``.
    """
    messages = req.messages
    leading = next((i for i, m in enumerate(messages) if m.role != "system"), len(messages))
    system = [text_of(req.system)] + [
        _system_text(m) for i, m in enumerate(messages[:leading]) if _shown_system(messages, i)
    ]
    out: list[ChatMessage] = []
    joined = "\n\n".join(part for part in system if part)
    if joined:
        out.append(ChatMessage(role="system", content=joined))
    names: dict[str, str] = {}
    for index in range(leading, len(messages)):
        message = messages[index]
        if message.role == "system":
            if _shown_system(messages, index):
                out.append(ChatMessage(role="system", content=_system_text(message)))
        elif message.role == "user":
            out.extend(_user_messages(message, names, images, f"messages[{index}]"))
        else:
            out.append(_assistant_message(message, names))
    return out


_TOOL_CHOICES: dict[type, ToolChoice] = {
    ToolChoiceAuto: "auto",
    ToolChoiceAny: "required",
    ToolChoiceTool: "function",
    ToolChoiceNone: "none",
}


def _tool_fields(req: PromptFields) -> dict[str, Any]:
    """The GenerateRequest tool fields: ``tools`` (None when none are
    offered), ``tool_choice`` (auto/required/function/none),
    ``tool_choice_name`` and ``parallel_tool_calls`` (False with
    ``disable_parallel_tool_use``)."""
    tools = tool_set(req).tools
    choice = req.tool_choice
    return {
        "tools": tools or None,
        "tool_choice": "auto" if choice is None else _TOOL_CHOICES[type(choice)],
        "tool_choice_name": choice.name if isinstance(choice, ToolChoiceTool) else None,
        "parallel_tool_calls": not getattr(choice, "disable_parallel_tool_use", None),
    }


def effort(req: PromptFields) -> Effort | None:
    """The effort in force: that of the last system turn setting one, else
    ``output_config.effort``, else None."""
    for message in reversed(req.messages):
        if message.output_config is not None and message.output_config.effort is not None:
            return message.output_config.effort
    return req.output_config.effort if req.output_config else None


def effort_budget(level: Effort, max_tokens: int) -> int | None:
    """The reasoning budget of effort ``level`` for ``max_tokens``: its
    :data:`EFFORT_BUDGET_SHARE`, at least 1 token (None for ``max``)."""
    share = EFFORT_BUDGET_SHARE[level]
    return None if share is None else max(1, int(max_tokens * share))


def _thinking(req: PromptFields) -> bool | None:
    """Reasoning on (enabled, adaptive, between_tools), off (disabled), or
    the template's default (absent)."""
    if req.thinking is None:
        return None
    return reasoning_on(req)


def _thinking_budget(req: MessagesRequest) -> tuple[int | None, bool]:
    """``(budget, best_effort)``: ``budget_tokens`` for enabled thinking;
    for adaptive / between_tools thinking, or an effort with thinking
    absent, the effort's budget; else none. Every budget is best effort
    (as upstream, where it is a target): a model whose reasoning cannot be
    capped (Harmony channels) runs without it, within ``max_tokens``, so
    agents that always send a budget keep working there."""
    thinking = req.thinking
    if isinstance(thinking, ThinkingEnabled):
        return thinking.budget_tokens, True
    if isinstance(thinking, ThinkingDisabled):
        return None, False
    level = effort(req)
    if thinking is None and level is None:
        return None, False
    return effort_budget(level or DEFAULT_EFFORT, req.max_tokens), True


def omit_thinking(req: PromptFields) -> bool:
    """Whether ``thinking.display`` is ``omitted`` (thinking blocks carry no
    text)."""
    return getattr(req.thinking, "display", None) == "omitted"


def _response_format(req: MessagesRequest) -> ResponseFormat | None:
    """``output_config.format`` (or ``output_format``) as a JSON-schema
    response format, enforced by the worker's grammar."""
    fmt = req.output_config.format if req.output_config and req.output_config.format else req.output_format
    return ResponseFormat(type="json_schema", schema=fmt.schema, strict=True) if fmt else None


def context_edits(req: PromptFields) -> list[Edit]:
    """The request's clear-thinking / clear-tool-uses edits, with defaults
    filled in (keep-all thinking edits are None-keep: no-ops)."""
    out: list[Edit] = []
    for edit in edits_of(req):
        if isinstance(edit, ClearThinkingEdit):
            keep = edit.keep
            if keep is None:
                out.append(ClearThinking(DEFAULT_KEPT_THINKING_TURNS))
            else:
                out.append(ClearThinking(keep.value if isinstance(keep, KeepThinkingTurns) else None))
        elif isinstance(edit, ClearToolUsesEdit):
            trigger = edit.trigger
            inputs = edit.clear_tool_inputs
            out.append(
                ClearToolUses(
                    trigger_tokens=trigger.value if isinstance(trigger, TokensTrigger) else None,
                    trigger_uses=trigger.value if isinstance(trigger, ToolUsesTrigger) else None,
                    keep=edit.keep.value if edit.keep else DEFAULT_KEPT_TOOL_USES,
                    clear_at_least=edit.clear_at_least.value if edit.clear_at_least else 0,
                    exclude=frozenset(edit.exclude_tools or ()),
                    clear_inputs=bool(inputs) if not isinstance(inputs, list) else frozenset(inputs),
                )
            )
    return out


def _sampling(req: MessagesRequest) -> SamplingParams:
    """The worker's sampling settings; unset ``temperature``, ``top_p`` and
    ``top_k`` stay None: the worker applies the model's defaults."""
    return SamplingParams(
        max_tokens=req.max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        stop=list(req.stop_sequences or ()),
    )


def to_generate_request(req: MessagesRequest, request_id: str, images: str = "placeholder") -> GenerateRequest:
    """Translate a validated messages request into the worker's request
    (one choice; ``timeout`` left for the backend to fill in). ``images`` as
    for :func:`chat_messages`.

    Raises:
        APIError: 400 as :func:`chat_messages`.
    """
    budget, best_effort = _thinking_budget(req)
    return GenerateRequest(
        request_id=request_id,
        sampling=_sampling(req),
        messages=chat_messages(req, images),
        thinking=_thinking(req),
        thinking_budget=budget,
        continue_final=prefilled(req),
        response_format=_response_format(req),
        thinking_budget_best_effort=best_effort,
        max_tokens_ceiling=True,
        **_tool_fields(req),
    )


def to_count_request(req: PromptFields, request_id: str, images: str = "placeholder") -> GenerateRequest:
    """Translate a validated request into a ``count_only`` worker request
    rendering the same prompt.

    Raises:
        APIError: 400 as :func:`chat_messages`.
    """
    return GenerateRequest(
        request_id=request_id,
        sampling=SamplingParams(),
        messages=chat_messages(req, images),
        thinking=_thinking(req),
        count_only=True,
        continue_final=prefilled(req),
        **_tool_fields(req),
    )
