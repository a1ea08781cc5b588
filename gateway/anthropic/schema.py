"""Request bodies of ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``:
the msgspec Struct shapes (declarative; decoding and the checks beyond
the types are in :mod:`gateway.anthropic.checks`).

Decoding is strict, as for the OpenAI endpoints: the body must be one JSON
object, no value is coerced, every number has bounds, every string and list
has a maximum length, and fields in no official spec are refused by name.
Every field, content block and tool type of the current Messages API (GA
and the beta fields coding agents send) is recognised and either honoured,
accepted with a defined local meaning, or refused with a 400 saying why;
docs/api/messages.md lists each with its status. Every refusal is an
:class:`~gateway.core.errors.APIError` 400 whose ``param`` is the offending field
path (``messages[1].content[0].type``) and whose message starts with it.

The decisions, in short:

* ``messages``: roles ``user``, ``assistant`` and ``system`` (a system turn
  anywhere: leading ones join the top-level ``system``, later ones stay
  system turns in place, ``clear_at: "next_user_message"`` ones are left out
  once a later user turn exists). Blocks: ``text`` (``citations`` accepted,
  only the text reaches the model), ``document`` with a text or content
  source and ``search_result`` (rendered as text), ``tool_use``,
  ``tool_result`` (text, documents, search results, tool references;
  images go to a vision model, else become a text placeholder or a 400,
  per the server key ``tool_result_images``), ``thinking``,
  ``redacted_thinking`` (left out: opaque to mlxd) and ``compaction`` (its
  summary text). ``image`` blocks of user turns go to the model (a 400 for
  a model without vision); server-tool, MCP and container blocks are
  a 400 (mlxd runs no server tools). A final assistant turn of text is a
  pre-filled response.
* ``tools``: see :mod:`gateway.anthropic.tools` (custom and
  Anthropic-defined client tools offered; server tools dropped).
* ``thinking``: ``enabled`` (its budget caps the reasoning block),
  ``adaptive`` and ``between_tools`` (reasoning on, budget from the effort),
  ``disabled``; ``display: "omitted"`` returns empty thinking blocks.
* ``output_config.effort`` (also per system turn): a reasoning budget, a
  share of ``max_tokens`` (see :mod:`gateway.anthropic.translate`);
  ``output_config.format`` (or the older beta ``output_format``): a JSON
  Schema enforced by grammar.
* ``context_management``: edits applied to the prompt
  (:mod:`gateway.anthropic.context`); ``compact_20260112``, ``compaction``
  (generation), ``thread`` and ``mcp_servers`` are refused.
* Accepted without effect (stated per field in the docs): ``metadata``,
  ``service_tier``, ``speed``, ``inference_geo``, ``container``,
  ``diagnostics``, ``user_profile_id``, ``workspace_id``, ``billing_policy``,
  ``fallbacks``, ``fallback_credit_token``, ``output_config.task_budget``,
  ``cache_control`` (honoured by the automatic prefix cache).

:mod:`gateway.anthropic.translate` turns a decoded request into the
worker's :class:`~shared.protocol.GenerateRequest`.

Longer than ~500 lines on purpose: it is declarations only, the one type
tree msgspec decodes a body with (the request, its messages, their content
blocks and tools refer to each other); its rules are in the checks.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

import msgspec
from msgspec import Meta, Raw

from gateway.anthropic.tools import CacheControl, ToolName
from gateway.frontend.validation import (
    MAX_CONTENT_PARTS,
    MAX_GENERATED_TOKENS,
    MAX_MESSAGES,
    MAX_STOP,
    MAX_STOP_CHARS,
    NULL,
    Identifier,
    MaxTokens,
    ModelName,
    ShortText,
    Text,
    TopP,
)

MAX_TOOLS = 512
"""Most tools in one request."""
MIN_THINKING_BUDGET = 1
"""Smallest ``thinking.budget_tokens``. Anthropic requires 1024; mlxd takes
any positive budget, since local deployments often cap output lower (Claude
Code with ``CLAUDE_CODE_MAX_OUTPUT_TOKENS`` below 1025 sends
``max_tokens - 1``)."""

Effort = Literal["low", "medium", "high", "xhigh", "max"]


# --- field types (bounds live in the types; the rest as for OpenAI) ----------

ToolUseId = Identifier
ThinkingBudget = Annotated[int, Meta(ge=MIN_THINKING_BUDGET, le=MAX_GENERATED_TOKENS)]
Temperature = Annotated[float, Meta(ge=0.0, le=1.0)]
TopK = Annotated[int, Meta(ge=0, le=MAX_GENERATED_TOKENS)]
StopSequence = Annotated[str, Meta(min_length=1, max_length=MAX_STOP_CHARS)]
Count = Annotated[int, Meta(ge=0, le=2**31 - 1)]
Positive = Annotated[int, Meta(ge=1, le=2**31 - 1)]
Blocks = Meta(max_length=MAX_CONTENT_PARTS)


def _recognised(tag: str) -> type:
    """A block type recognised by its ``type`` only, to be refused with a
    reason (its other fields are not read)."""
    return msgspec.defstruct(f"Refused_{tag}", [], tag_field="type", tag=tag)


# --- content blocks ------------------------------------------------------------


class TextBlock(msgspec.Struct, tag_field="type", tag="text", forbid_unknown_fields=True, kw_only=True):
    """``{"type": "text", "text"}``; ``citations`` accepted, not rendered."""

    text: Text
    cache_control: CacheControl | None = None
    citations: Raw = NULL


class ImageBlock(msgspec.Struct, tag_field="type", tag="image", forbid_unknown_fields=True, kw_only=True):
    """An image (``source``: base64 or an http(s) URL, read by
    :func:`gateway.images.parts.anthropic_image_source`): for a vision
    model; otherwise a 400, or a placeholder inside a tool result."""

    source: dict[str, Any]
    cache_control: CacheControl | None = None
    transformations: dict[str, Any] | None = None


class PlainTextSource(msgspec.Struct, tag_field="type", tag="text", forbid_unknown_fields=True, kw_only=True):
    """A document's plain-text source."""

    data: Text
    media_type: Literal["text/plain"]


class ContentSource(msgspec.Struct, tag_field="type", tag="content", forbid_unknown_fields=True, kw_only=True):
    """A document made of content blocks (text; images as elsewhere)."""

    content: Union[Text, Annotated[list[Union[TextBlock, ImageBlock]], Blocks]]


DocumentSource = Union[PlainTextSource, ContentSource, _recognised("base64"), _recognised("url"), _recognised("file")]
"""A document's ``source`` (only text and content sources are readable)."""


class DocumentBlock(msgspec.Struct, tag_field="type", tag="document", forbid_unknown_fields=True, kw_only=True):
    """A document, rendered as its title, context and text."""

    source: DocumentSource
    title: ShortText | None = None
    context: Text | None = None
    citations: dict[str, Any] | None = None
    cache_control: CacheControl | None = None


class SearchResultBlock(
    msgspec.Struct, tag_field="type", tag="search_result", forbid_unknown_fields=True, kw_only=True
):
    """A search result, rendered as its title, source and text."""

    content: Annotated[list[TextBlock], Blocks]
    source: Text
    title: Text
    citations: dict[str, Any] | None = None
    cache_control: CacheControl | None = None


class ToolUseBlock(msgspec.Struct, tag_field="type", tag="tool_use", forbid_unknown_fields=True, kw_only=True):
    """An earlier tool call of an assistant turn; ``input`` is its arguments.

    ``caller`` (only null or ``{"type": "direct"}``) and ``toolset_name``
    (only null) are accepted so a response block can be sent back as the
    SDK dumps it.
    """

    id: ToolUseId
    name: ToolName
    input: dict[str, Any]
    cache_control: CacheControl | None = None
    caller: Raw = NULL
    toolset_name: Raw = NULL


class ToolReferenceBlock(
    msgspec.Struct, tag_field="type", tag="tool_reference", forbid_unknown_fields=True, kw_only=True
):
    """A reference to a tool (client-side tool search); rendered as its name
    (mlxd offers every tool anyway)."""

    tool_name: ShortText
    cache_control: CacheControl | None = None


ToolResultContent = Union[
    TextBlock, ImageBlock, SearchResultBlock, DocumentBlock, ToolReferenceBlock, _recognised("browser_state")
]
"""What a tool result's content list may hold."""


class ToolResultBlock(msgspec.Struct, tag_field="type", tag="tool_result", forbid_unknown_fields=True, kw_only=True):
    """The result of the tool call ``tool_use_id``, in a user turn."""

    tool_use_id: ToolUseId
    content: Union[Text, Annotated[list[ToolResultContent], Blocks], None] = None
    is_error: bool | None = None
    cache_control: CacheControl | None = None
    toolset_name: Raw = NULL


class ThinkingBlock(msgspec.Struct, tag_field="type", tag="thinking", forbid_unknown_fields=True, kw_only=True):
    """Earlier reasoning of an assistant turn (``signature`` is not checked;
    mlxd's own are empty)."""

    thinking: Text
    signature: Text


class RedactedThinkingBlock(
    msgspec.Struct, tag_field="type", tag="redacted_thinking", forbid_unknown_fields=True, kw_only=True
):
    """Encrypted reasoning of another provider: left out of the prompt."""

    data: Text


class CompactionBlock(msgspec.Struct, tag_field="type", tag="compaction", forbid_unknown_fields=True, kw_only=True):
    """A summary of earlier turns: ``content`` is rendered as text."""

    content: Text | None = None
    encrypted_content: Text | None = None
    signature: Text | None = None
    tool_changes: Raw = NULL
    cache_control: CacheControl | None = None


_SERVER_BLOCKS = (
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "advisor_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
)
REFUSED_BLOCKS: dict[str, str] = {
    **{tag: "mlxd runs no server tools" for tag in _SERVER_BLOCKS},
    "mcp_tool_use": "MCP blocks without mcp_servers are not supported",
    "mcp_tool_result": "MCP blocks without mcp_servers are not supported",
    "mcp_tool_listing": "MCP servers are not supported",
    "container_upload": "mlxd has no code-execution containers",
    "fallback": "mlxd has no server-side model fallbacks",
    "tool_addition": "tool changes inside messages are not supported (list every tool in 'tools')",
    "tool_removal": "tool changes inside messages are not supported (list every tool in 'tools')",
    "browser_state": "browser tools are not supported",
    "video": "the Messages API has no video block; send videos as 'video_url' parts to /v1/chat/completions",
}
"""Block types recognised only to be refused, with the reason."""

_REFUSED_TYPES = tuple(_recognised(tag) for tag in REFUSED_BLOCKS if tag != "browser_state")

ContentBlock = Union[
    TextBlock,
    ImageBlock,
    DocumentBlock,
    SearchResultBlock,
    ToolUseBlock,
    ToolResultBlock,
    ThinkingBlock,
    RedactedThinkingBlock,
    CompactionBlock,
    *_REFUSED_TYPES,  # type: ignore[misc]
]
"""Any block a message's content list may hold (the type decides)."""


class SystemOutputConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A system turn's ``output_config``: its ``effort`` applies from there on."""

    effort: Effort | None = None


class MessageParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One turn: ``role`` ``user``, ``assistant`` or ``system``; ``content`` a
    string or 1..1024 blocks (a system turn may carry only ``output_config``).
    ``clear_at`` and ``output_config`` are system-turn fields."""

    role: ShortText
    content: Union[Text, Annotated[list[ContentBlock], Meta(min_length=1, max_length=MAX_CONTENT_PARTS)], None] = None
    clear_at: Literal["next_user_message", "never"] | None = None
    output_config: SystemOutputConfig | None = None


# --- tool choice, thinking, output config ------------------------------------------


class ToolChoiceAuto(msgspec.Struct, tag_field="type", tag="auto", forbid_unknown_fields=True, kw_only=True):
    """The model decides whether to call tools."""

    disable_parallel_tool_use: bool | None = None


class ToolChoiceAny(msgspec.Struct, tag_field="type", tag="any", forbid_unknown_fields=True, kw_only=True):
    """The model must call at least one tool."""

    disable_parallel_tool_use: bool | None = None


class ToolChoiceTool(msgspec.Struct, tag_field="type", tag="tool", forbid_unknown_fields=True, kw_only=True):
    """The model must call the tool ``name``."""

    name: ToolName
    disable_parallel_tool_use: bool | None = None


class ToolChoiceNone(msgspec.Struct, tag_field="type", tag="none", forbid_unknown_fields=True, kw_only=True):
    """The model must not call tools."""


ToolChoiceParam = Union[ToolChoiceAuto, ToolChoiceAny, ToolChoiceTool, ToolChoiceNone]
"""``tool_choice`` (its ``type`` decides)."""

Display = Literal["summarized", "omitted", "updates"]
"""``thinking.display``: ``omitted`` returns thinking blocks with empty
text; the others return the whole reasoning."""


class BlockBinding(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``thinking.block_binding``: accepted; mlxd never rejects a thinking
    block it receives (it does not sign or check them)."""

    prefix_mismatch_behavior: Literal["error", "drop_block"] | None = None


class ThinkingEnabled(msgspec.Struct, tag_field="type", tag="enabled", forbid_unknown_fields=True, kw_only=True):
    """Turn the model's reasoning mode on, capped at ``budget_tokens``."""

    budget_tokens: ThinkingBudget
    display: Display | None = None
    block_binding: BlockBinding | None = None


class ThinkingAdaptive(msgspec.Struct, tag_field="type", tag="adaptive", forbid_unknown_fields=True, kw_only=True):
    """Turn the model's reasoning mode on; the budget follows the effort."""

    display: Display | None = None
    block_binding: BlockBinding | None = None


class ThinkingBetweenTools(
    msgspec.Struct, tag_field="type", tag="between_tools", forbid_unknown_fields=True, kw_only=True
):
    """Reasoning between tool calls: mlxd turns reasoning on as for adaptive."""


class ThinkingDisabled(msgspec.Struct, tag_field="type", tag="disabled", forbid_unknown_fields=True, kw_only=True):
    """Turn the model's reasoning mode off."""


ThinkingParam = Union[ThinkingEnabled, ThinkingAdaptive, ThinkingBetweenTools, ThinkingDisabled]
"""``thinking`` (its ``type`` decides)."""


class JsonOutputFormat(msgspec.Struct, tag_field="type", tag="json_schema", forbid_unknown_fields=True, kw_only=True):
    """Structured output: the answer is JSON valid against ``schema``."""

    schema: dict[str, Any]


class TaskBudget(msgspec.Struct, tag_field="type", tag="tokens", forbid_unknown_fields=True, kw_only=True):
    """``output_config.task_budget``: accepted, not shown to the model."""

    total: Positive
    remaining: Count | None = None


class OutputConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``output_config``: effort, output format and task budget."""

    effort: Effort | None = None
    format: JsonOutputFormat | None = None
    task_budget: TaskBudget | None = None


class Metadata(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``metadata``: an opaque end-user id (accepted, not used by mlxd)."""

    user_id: ShortText | None = None


# --- context management --------------------------------------------------------------


class KeepThinkingTurns(msgspec.Struct, tag_field="type", tag="thinking_turns", forbid_unknown_fields=True):
    """Keep the reasoning of the last ``value`` turns."""

    value: Positive


class KeepAllThinking(msgspec.Struct, tag_field="type", tag="all", forbid_unknown_fields=True):
    """Keep all reasoning."""


class ClearThinkingEdit(
    msgspec.Struct, tag_field="type", tag="clear_thinking_20251015", forbid_unknown_fields=True, kw_only=True
):
    """Clear the reasoning of earlier assistant turns."""

    keep: Union[KeepThinkingTurns, KeepAllThinking, Literal["all"], None] = None


class TokensTrigger(msgspec.Struct, tag_field="type", tag="input_tokens", forbid_unknown_fields=True):
    """Act once the prompt has more than ``value`` tokens."""

    value: Positive


class ToolUsesTrigger(msgspec.Struct, tag_field="type", tag="tool_uses", forbid_unknown_fields=True):
    """Act once the conversation has more than ``value`` tool uses."""

    value: Positive


class KeepToolUses(msgspec.Struct, forbid_unknown_fields=True):
    """Keep the last ``value`` tool uses."""

    type: Literal["tool_uses"]
    value: Count


class ClearAtLeast(msgspec.Struct, forbid_unknown_fields=True):
    """Apply the edit only if it clears at least ``value`` prompt tokens."""

    type: Literal["input_tokens"]
    value: Count


class ClearToolUsesEdit(
    msgspec.Struct, tag_field="type", tag="clear_tool_uses_20250919", forbid_unknown_fields=True, kw_only=True
):
    """Clear the results of old tool uses."""

    trigger: Union[TokensTrigger, ToolUsesTrigger, None] = None
    keep: KeepToolUses | None = None
    clear_at_least: ClearAtLeast | None = None
    exclude_tools: Annotated[list[ShortText], Meta(max_length=MAX_TOOLS)] | None = None
    clear_tool_inputs: Union[bool, Annotated[list[ShortText], Meta(max_length=MAX_TOOLS)], None] = None


class CompactEdit(msgspec.Struct, tag_field="type", tag="compact_20260112", forbid_unknown_fields=True, kw_only=True):
    """Server-side compaction: refused (mlxd does not summarise)."""

    pause_after_compaction: bool | None = None
    trigger: TokensTrigger | None = None


class ContextManagement(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``context_management``: edits applied to the prompt."""

    edits: Annotated[list[Union[ClearThinkingEdit, ClearToolUsesEdit, CompactEdit]], Meta(max_length=16)] | None = None


# --- accepted-without-effect objects ---------------------------------------------------------


class Skill(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A container skill (accepted with the container, unused)."""

    skill_id: ShortText
    type: Literal["anthropic", "custom"]
    version: ShortText | None = None


class ContainerParams(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``container`` as an object (accepted, unused: no code execution)."""

    id: ShortText | None = None
    skills: Annotated[list[Skill], Meta(max_length=64)] | None = None


class Diagnostics(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``diagnostics`` (accepted; the response's ``diagnostics`` is null)."""

    previous_message_id: ShortText | None = None


class BillingPolicy(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``billing_policy`` (accepted; mlxd bills nobody)."""

    type: Literal["billing_policy"]
    bill_to: Literal["self", "user_profile"] | None = None


class FallbackCreditToken(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``fallback_credit_token`` as an object (accepted, unused)."""

    token: ShortText
    mode: Literal["strict", "best_effort"] | None = None


# --- request bodies ------------------------------------------------------------

SystemParam = Union[Text, Annotated[list[TextBlock], Blocks], None]
"""``system``: a string or text blocks."""


class PromptFields(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Fields both endpoints share: what makes up the prompt."""

    model: ModelName
    messages: Annotated[list[MessageParam], Meta(min_length=1, max_length=MAX_MESSAGES)]
    system: SystemParam = None
    tools: Annotated[list[Raw], Meta(max_length=MAX_TOOLS)] | None = None
    tool_choice: ToolChoiceParam | None = None
    thinking: ThinkingParam | None = None
    cache_control: CacheControl | None = None
    output_config: OutputConfig | None = None
    context_management: ContextManagement | None = None
    speed: Literal["standard", "fast"] | None = None
    user_profile_id: ShortText | None = None
    workspace_id: ShortText | None = None
    billing_policy: BillingPolicy | None = None
    compaction: Raw = NULL
    mcp_servers: Annotated[list[Raw], Meta(max_length=64)] | None = None


class MessagesRequest(PromptFields, forbid_unknown_fields=True, kw_only=True):
    """A decoded, validated ``POST /v1/messages`` body.

    Produced only by :func:`decode_messages_request`, which guarantees every
    constraint in the module docstring.
    """

    max_tokens: MaxTokens
    stop_sequences: Annotated[list[StopSequence], Meta(max_length=MAX_STOP)] | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    stream: bool | None = None
    metadata: Metadata | None = None
    output_format: JsonOutputFormat | None = None
    service_tier: Literal["auto", "standard_only"] | None = None
    inference_geo: ShortText | None = None
    container: Union[ShortText, ContainerParams, None] = None
    diagnostics: Diagnostics | None = None
    fallbacks: Union[Literal["default"], Annotated[list[dict[str, Any]], Meta(max_length=16)], None] = None
    fallback_credit_token: Union[ShortText, FallbackCreditToken, None] = None
    thread: Raw = NULL


class CountTokensRequest(PromptFields, forbid_unknown_fields=True, kw_only=True):
    """A decoded, validated ``POST /v1/messages/count_tokens`` body.

    Produced only by :func:`decode_count_tokens_request`.
    """
