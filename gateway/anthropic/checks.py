"""Decoding and checking of ``POST /v1/messages`` and
``POST /v1/messages/count_tokens`` bodies (:mod:`gateway.anthropic.schema`
has their shapes; its docstring the decisions).

:func:`decode_messages_request` and :func:`decode_count_tokens_request`
decode strictly (:func:`gateway.frontend.validation.decode_body`, Anthropic's
wording) and then check what the types cannot express: the prompt's
messages and blocks, pre-filled answers, ``tool_choice`` against the
offered tools (:func:`tool_set`), context-management edits and the fields
mlxd refuses. Every refusal is an :class:`~gateway.core.errors.APIError` 400
whose message starts with the offending field path. Also the small readers
the translation shares (:func:`blocks_of`, :func:`edits_of`,
:func:`text_of`, ...). Pure functions, called on the event loop.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.anthropic.schema import (
    REFUSED_BLOCKS,
    CompactEdit,
    CompactionBlock,
    ContentSource,
    CountTokensRequest,
    DocumentBlock,
    ImageBlock,
    MessageParam,
    MessagesRequest,
    PlainTextSource,
    PromptFields,
    RedactedThinkingBlock,
    SearchResultBlock,
    TextBlock,
    ThinkingAdaptive,
    ThinkingBetweenTools,
    ThinkingBlock,
    ThinkingEnabled,
    ToolChoiceAny,
    ToolChoiceParam,
    ToolChoiceTool,
    ToolResultBlock,
    ToolUseBlock,
)
from gateway.anthropic.tools import ToolSet, offered_tools
from gateway.core.errors import APIError
from gateway.frontend.validation import decode_body, field_error, is_null, not_supported

_USER_BLOCKS = (TextBlock, ImageBlock, DocumentBlock, SearchResultBlock, ToolResultBlock, CompactionBlock)
_ASSISTANT_BLOCKS = (TextBlock, ToolUseBlock, ThinkingBlock, RedactedThinkingBlock, CompactionBlock)


def _tag(block: Any) -> str:
    """The ``type`` tag of a decoded block."""
    return type(block).__struct_config__.tag


_REASONING_ON = (ThinkingEnabled, ThinkingAdaptive, ThinkingBetweenTools)


# --- decoding ------------------------------------------------------------------

_messages_decoder = msgspec.json.Decoder(MessagesRequest)
_count_decoder = msgspec.json.Decoder(CountTokensRequest)
_encoder = msgspec.json.Encoder()


def decode_messages_request(body: bytes) -> MessagesRequest:
    """Decode and fully validate a ``POST /v1/messages`` body.

    Raises:
        APIError: 400 with ``param`` naming the first offending field.
    """
    req: MessagesRequest = decode_body(_messages_decoder, body, "anthropic")
    _check_prompt(req)
    if not is_null(req.compaction):
        raise not_supported("compaction", "server-side compaction (mlxd does not summarise conversations)", "anthropic")
    if not is_null(req.thread):
        raise not_supported(
            "thread", "server-held conversation threads (mlxd keeps no conversation state)", "anthropic"
        )
    if req.output_format is not None and req.output_config is not None and req.output_config.format is not None:
        raise field_error("output_format", "give the format once, in output_config.format")
    thinking = req.thinking
    if isinstance(thinking, ThinkingEnabled) and isinstance(req.tool_choice, (ToolChoiceAny, ToolChoiceTool)):
        raise field_error(
            "tool_choice",
            f"tool_choice '{_tag(req.tool_choice)}' forces tool use, which cannot be combined with thinking "
            "(use 'auto' or 'none')",
        )
    if isinstance(thinking, ThinkingEnabled) and thinking.budget_tokens >= req.max_tokens:
        raise field_error(
            "thinking.budget_tokens",
            f"must be less than max_tokens ({req.max_tokens}), got {thinking.budget_tokens}",
        )
    return req


def decode_count_tokens_request(body: bytes) -> CountTokensRequest:
    """Decode and fully validate a ``POST /v1/messages/count_tokens`` body
    (``compaction`` is accepted and ignored there, as documented upstream).

    Raises:
        APIError: 400 with ``param`` naming the first offending field.
    """
    req: CountTokensRequest = decode_body(_count_decoder, body, "anthropic")
    _check_prompt(req)
    return req


# --- checks beyond what the types express ----------------------------------------


def _check_prompt(req: PromptFields) -> None:
    """Checks shared by both endpoints: system, tools, tool choice, messages,
    context management, MCP servers.

    Raises:
        APIError: 400 naming the field.
    """
    if req.mcp_servers:
        # answered by gateway.anthropic.mcp before decoding; never translated here
        raise not_supported("mcp_servers", "MCP servers outside the MCP tool loop", "anthropic")
    toolset = tool_set(req)
    _check_tool_choice(req.tool_choice, [tool.name for tool in toolset.tools], toolset.dropped_names)
    _check_messages(req.messages)
    for index, edit in enumerate(edits_of(req)):
        if isinstance(edit, CompactEdit):
            raise not_supported(
                f"context_management.edits[{index}].type",
                "'compact_20260112' (server-side compaction: mlxd does not summarise conversations)",
                "anthropic",
            )
    if prefilled(req):
        _check_prefill(req)


def edits_of(req: PromptFields) -> list[Any]:
    """The request's context-management edits (empty when none)."""
    return list(req.context_management.edits or ()) if req.context_management else []


def prefilled(req: PromptFields) -> bool:
    """Whether the request ends with an assistant turn to continue."""
    return req.messages[-1].role == "assistant"


def reasoning_on(req: PromptFields) -> bool:
    """Whether ``thinking`` turns reasoning on (enabled, adaptive,
    between_tools)."""
    return isinstance(req.thinking, _REASONING_ON)


def _check_prefill(req: PromptFields) -> None:
    """A final assistant turn must be text only, not end with whitespace,
    and come without reasoning turned on or a forced tool choice.

    Raises:
        APIError: 400 naming the field.
    """
    last = len(req.messages) - 1
    message = req.messages[last]
    for number, block in enumerate(blocks_of(message)):
        if not isinstance(block, TextBlock):
            raise not_supported(
                f"messages[{last}].content[{number}].type",
                f"'{_tag(block)}' blocks in a final (pre-filled) assistant turn",
                "anthropic",
            )
    text = message.content if isinstance(message.content, str) else text_of(message.content)  # type: ignore[arg-type]
    if text != text.rstrip():
        raise field_error(f"messages[{last}].content", "final assistant content cannot end with trailing whitespace")
    if isinstance(req.thinking, _REASONING_ON):
        raise field_error("thinking", "a final assistant turn (pre-filled response) cannot be used with thinking on")
    if isinstance(req.tool_choice, (ToolChoiceAny, ToolChoiceTool)):
        raise not_supported(
            "tool_choice", f"tool_choice '{_tag(req.tool_choice)}' with a pre-filled response", "anthropic"
        )


def tool_set(req: PromptFields) -> ToolSet:
    """The request's tools sorted into offered and dropped
    (:func:`gateway.anthropic.tools.offered_tools`).

    Raises:
        APIError: 400 for an unknown tool type or an invalid tool.
    """
    return offered_tools(list(req.tools or ()))


def _check_tool_choice(choice: ToolChoiceParam | None, names: list[str], dropped: set[str]) -> None:
    """``any`` and ``tool`` need tools; ``tool`` must name an offered one.

    Raises:
        APIError: 400 param ``tool_choice`` / ``tool_choice.name``.
    """
    if isinstance(choice, (ToolChoiceAny, ToolChoiceTool)) and not names:
        raise field_error("tool_choice", f"tool_choice type '{_tag(choice)}' requires 'tools' that mlxd can offer")
    if isinstance(choice, ToolChoiceTool) and choice.name not in names:
        if choice.name in dropped:
            raise field_error(
                "tool_choice.name", f"'{choice.name}' is a server tool mlxd cannot run, so it was dropped"
            )
        raise field_error("tool_choice.name", f"no tool named '{choice.name}' in 'tools'")


def _check_messages(messages: list[MessageParam]) -> None:
    """Roles, per-role fields and blocks, and tool-result ids.

    Raises:
        APIError: 400 naming e.g. ``messages[2].content[0].type``.
    """
    tool_use_ids: set[str] = set()
    for index, message in enumerate(messages):
        path = f"messages[{index}]"
        if message.role not in ("user", "assistant", "system"):
            raise field_error(f"{path}.role", f"role must be 'user', 'assistant' or 'system', got '{message.role}'")
        if message.role != "system":
            for name in ("clear_at", "output_config"):
                if getattr(message, name) is not None:
                    raise field_error(f"{path}.{name}", "Extra inputs are not permitted (only system turns have it)")
            if message.content is None:
                raise field_error(f"{path}.content", "Field required")
        elif message.content is None and message.output_config is None:
            raise field_error(f"{path}.content", "a system turn needs content or output_config")
        for number, block in enumerate(blocks_of(message)):
            _check_block(block, message.role, f"{path}.content[{number}]", tool_use_ids)


def blocks_of(message: MessageParam) -> list[Any]:
    """The message's blocks (none for string or absent content)."""
    return message.content if isinstance(message.content, list) else []


def _check_block(block: Any, role: str, path: str, tool_use_ids: set[str]) -> None:
    """Check one block of a ``role`` turn; record tool_use ids, check tool
    results against them.

    Raises:
        APIError: 400 for a refused block, a block the role may not send, an
        unreadable document, or a tool result without its tool use.
    """
    tag = _tag(block)
    if tag in REFUSED_BLOCKS:
        raise not_supported(f"{path}.type", f"content block type '{tag}' ({REFUSED_BLOCKS[tag]})", "anthropic")
    if isinstance(block, ImageBlock) and role != "user":
        raise field_error(f"{path}.type", f"'image' blocks are not allowed in {role} turns")
    allowed = {"user": _USER_BLOCKS, "assistant": _ASSISTANT_BLOCKS, "system": (TextBlock,)}[role]
    if not isinstance(block, allowed):
        raise field_error(f"{path}.type", f"'{tag}' blocks are not allowed in {role} turns")
    if isinstance(block, DocumentBlock):
        _check_document(block, path)
    elif isinstance(block, ToolUseBlock):
        _check_tool_use(block, path)
        tool_use_ids.add(block.id)
    elif isinstance(block, ToolResultBlock):
        _check_tool_result(block, path, tool_use_ids)
    elif isinstance(block, CompactionBlock) and block.content is None:
        raise not_supported(f"{path}.content", "a compaction block without readable 'content'", "anthropic")


def no_vision(param: str) -> APIError:
    """The 400 for an image the model cannot see."""
    return field_error(param, "this model has no vision support, so 'image' blocks cannot be read")


def _check_document(block: DocumentBlock, path: str) -> None:
    """Only text documents can be read (no PDF, URL or file sources; no
    images inside a content source).

    Raises:
        APIError: 400 naming the source.
    """
    source = block.source
    if not isinstance(source, (PlainTextSource, ContentSource)):
        raise not_supported(
            f"{path}.source.type",
            f"document source type '{_tag(source)}' (only 'text' and 'content' documents can be read)",
            "anthropic",
        )
    if isinstance(source, ContentSource) and isinstance(source.content, list):
        for number, item in enumerate(source.content):
            if isinstance(item, ImageBlock):
                raise no_vision(f"{path}.source.content[{number}].type")


def _check_tool_use(block: ToolUseBlock, path: str) -> None:
    """Accept only a direct ``caller`` and no ``toolset_name``.

    Raises:
        APIError: 400 naming the field.
    """
    if not is_null(block.caller) and msgspec.json.decode(block.caller) != {"type": "direct"}:
        raise not_supported(
            f"{path}.caller", "a tool_use 'caller' other than direct (mlxd runs no code execution)", "anthropic"
        )
    if not is_null(block.toolset_name):
        raise not_supported(f"{path}.toolset_name", "toolsets (MCP)", "anthropic")


def _check_tool_result(block: ToolResultBlock, path: str, tool_use_ids: set[str]) -> None:
    """The result must answer an earlier tool use; its content blocks must
    be readable (images are handled at translation).

    Raises:
        APIError: 400 naming ``tool_use_id`` or the offending content block.
    """
    if block.tool_use_id not in tool_use_ids:
        raise field_error(
            f"{path}.tool_use_id",
            f"no tool_use block with id '{block.tool_use_id}' in an earlier assistant turn",
        )
    if not is_null(block.toolset_name):
        raise not_supported(f"{path}.toolset_name", "toolsets (MCP)", "anthropic")
    if isinstance(block.content, list):
        for number, item in enumerate(block.content):
            item_path = f"{path}.content[{number}]"
            tag = _tag(item)
            if tag in REFUSED_BLOCKS:
                raise not_supported(
                    f"{item_path}.type", f"content block type '{tag}' ({REFUSED_BLOCKS[tag]})", "anthropic"
                )
            if isinstance(item, DocumentBlock):
                _check_document(item, item_path)


# --- shared with the translation -----------------------------------------------


def text_of(content: str | list[TextBlock] | None) -> str:
    """Text content as one string (text blocks concatenated)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(block.text for block in content)
