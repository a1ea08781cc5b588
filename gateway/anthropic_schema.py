"""Request bodies of ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

Decoding is strict, as for the OpenAI endpoints: the body must be one JSON
object, no value is coerced, every number has bounds, every string and list
has a maximum length, and unknown fields are refused by name. Everything the
Anthropic Messages API defines that mlxd cannot honour is refused with a 400
that says so; nothing is silently dropped. Every refusal is an
:class:`~gateway.errors.APIError` 400 whose ``param`` is the offending field
path (``messages[1].content[0].type``) and whose message starts with it.

What is accepted:

* ``messages`` (1..2048) with roles ``user`` and ``assistant``; content is a
  string or a list of blocks. ``text`` blocks anywhere; in assistant turns
  ``tool_use`` ``{id, name, input}`` and ``thinking`` ``{thinking,
  signature}``; in user turns ``tool_result`` ``{tool_use_id, content: a
  string or text blocks, is_error}``, whose ``tool_use_id`` must name a
  ``tool_use`` of an earlier assistant turn. ``image``, ``document`` and
  ``redacted_thinking`` blocks are refused as not supported. The last turn
  may be an assistant turn of text only (a pre-filled response): the model
  continues it and the answer holds only the continuation. As in the
  Anthropic API, its text may not end with whitespace, and pre-filling is
  refused with ``thinking`` enabled; mlxd also refuses it with a forced
  tool choice (``any`` or ``tool``).
* ``system`` as a string or text blocks.
* ``cache_control`` ``{"type": "ephemeral", "ttl"?: "5m" | "1h"}`` on the
  request, on system, text, tool_use and tool_result blocks and on tools. It
  is honoured by what it asks for: mlxd's prefix cache reuses every shared
  prompt prefix automatically, with no marker needed; the entries' lifetime
  follows the cache's memory budget, not ``ttl``.
* ``tools`` (custom tools ``{name, description, input_schema, type?:
  "custom", cache_control}``; server tools such as ``web_search_20250305``
  are refused) and ``tool_choice`` ``auto | any | tool(name) | none`` with
  ``disable_parallel_tool_use``.
* ``thinking`` ``{"type": "enabled", "budget_tokens": >= 1024 and <
  max_tokens}`` or ``{"type": "disabled"}``. The budget caps the reasoning
  block: when it is used up the worker closes the block, and the answer
  follows (reasoning and answer together stay within ``max_tokens``). As
  in the Anthropic API, enabled thinking cannot be combined with a
  ``tool_choice`` that forces tool use (``any``, ``tool``).
* ``stop_sequences`` (<= 16, each 1..512 characters), ``temperature``
  [0, 1], ``top_p`` (0, 1], ``top_k`` >= 0, ``stream``, ``metadata``
  ``{user_id}`` (an opaque id for the provider's abuse tracking; mlxd has
  none and does not use it).

:func:`to_generate_request` and :func:`to_count_request` turn a decoded
request into the worker's :class:`~shared.protocol.GenerateRequest`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

import msgspec
from msgspec import Meta, Raw

from gateway.errors import APIError, bad_request
from gateway.openai_schema import (
    MAX_CONTENT_PARTS,
    MAX_GENERATED_TOKENS,
    MAX_MESSAGES,
    MAX_STOP,
    MAX_STOP_CHARS,
    Identifier,
    MaxTokens,
    ModelName,
    ShortText,
    Text,
    TopP,
    decode_body,
)
from shared.protocol import ChatMessage, GenerateRequest, SamplingParams, Tool, ToolCall, ToolChoice

MAX_TOOLS = 512
"""Most tools in one request."""
MIN_THINKING_BUDGET = 1024
"""Smallest ``thinking.budget_tokens`` (Anthropic's minimum)."""
TOOL_ERROR_PREFIX = "Error: "
"""What starts the content of a tool result sent with ``is_error: true``, so
the model sees that the tool failed (the worker's tool turns carry text only)."""

_NULL = Raw(b"null")

# --- field types (bounds live in the types; the rest as for OpenAI) ----------

ToolName = Annotated[str, Meta(pattern=r"^[a-zA-Z0-9_-]{1,128}$")]
ToolUseId = Identifier
ThinkingBudget = Annotated[int, Meta(ge=MIN_THINKING_BUDGET, le=MAX_GENERATED_TOKENS)]
Temperature = Annotated[float, Meta(ge=0.0, le=1.0)]
TopK = Annotated[int, Meta(ge=0, le=MAX_GENERATED_TOKENS)]
StopSequence = Annotated[str, Meta(min_length=1, max_length=MAX_STOP_CHARS)]


class CacheControl(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A prompt-caching breakpoint; see the module docstring for how mlxd
    honours it."""

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


# --- content blocks ------------------------------------------------------------


class TextBlock(msgspec.Struct, tag_field="type", tag="text", forbid_unknown_fields=True, kw_only=True):
    """``{"type": "text", "text"}``; ``citations`` only null or empty."""

    text: Text
    cache_control: CacheControl | None = None
    citations: Raw = _NULL


class ImageBlock(msgspec.Struct, tag_field="type", tag="image"):
    """An image block: recognised only to be refused as not supported."""


class DocumentBlock(msgspec.Struct, tag_field="type", tag="document"):
    """A document block: recognised only to be refused as not supported."""


class RedactedThinkingBlock(msgspec.Struct, tag_field="type", tag="redacted_thinking"):
    """Encrypted reasoning: recognised only to be refused as not supported."""


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
    caller: Raw = _NULL
    toolset_name: Raw = _NULL


ToolResultContent = Union[TextBlock, ImageBlock, DocumentBlock]
"""What a tool result's content list may hold (only text is supported)."""


class ToolResultBlock(msgspec.Struct, tag_field="type", tag="tool_result", forbid_unknown_fields=True, kw_only=True):
    """The result of the tool call ``tool_use_id``, in a user turn."""

    tool_use_id: ToolUseId
    content: Union[Text, Annotated[list[ToolResultContent], Meta(max_length=MAX_CONTENT_PARTS)], None] = None
    is_error: bool | None = None
    cache_control: CacheControl | None = None


class ThinkingBlock(msgspec.Struct, tag_field="type", tag="thinking", forbid_unknown_fields=True, kw_only=True):
    """Earlier reasoning of an assistant turn (``signature`` is not checked;
    mlxd's own are empty)."""

    thinking: Text
    signature: Text


ContentBlock = Union[
    TextBlock, ImageBlock, DocumentBlock, ToolUseBlock, ToolResultBlock, ThinkingBlock, RedactedThinkingBlock
]
"""Any block a message's content list may hold (the type decides)."""

_USER_BLOCKS = (TextBlock, ToolResultBlock)
_ASSISTANT_BLOCKS = (TextBlock, ToolUseBlock, ThinkingBlock)
_UNSUPPORTED_BLOCKS = {ImageBlock: "image", DocumentBlock: "document", RedactedThinkingBlock: "redacted_thinking"}


class MessageParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One turn: ``role`` ``user`` or ``assistant``, ``content`` a string or
    1..1024 blocks."""

    role: ShortText
    content: Union[Text, Annotated[list[ContentBlock], Meta(min_length=1, max_length=MAX_CONTENT_PARTS)]]


# --- tools ---------------------------------------------------------------------


class _ToolKind(msgspec.Struct, kw_only=True):
    """Only a tool's ``type``, read first so server tools are refused by
    their type rather than by their fields."""

    type: Any = None


class CustomTool(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A client-side tool: ``input_schema`` is the JSON Schema of its input
    (an object schema)."""

    name: ToolName
    input_schema: dict[str, Any]
    description: Text | None = None
    type: Literal["custom"] | None = None
    cache_control: CacheControl | None = None


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


class ThinkingEnabled(msgspec.Struct, tag_field="type", tag="enabled", forbid_unknown_fields=True, kw_only=True):
    """Turn the model's reasoning mode on."""

    budget_tokens: ThinkingBudget


class ThinkingDisabled(msgspec.Struct, tag_field="type", tag="disabled", forbid_unknown_fields=True, kw_only=True):
    """Turn the model's reasoning mode off."""


ThinkingParam = Union[ThinkingEnabled, ThinkingDisabled]
"""``thinking`` (its ``type`` decides)."""


class Metadata(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``metadata``: an opaque end-user id (accepted, not used by mlxd)."""

    user_id: ShortText | None = None


# --- request bodies ------------------------------------------------------------

SystemParam = Union[Text, Annotated[list[TextBlock], Meta(max_length=MAX_CONTENT_PARTS)], None]
"""``system``: a string or text blocks."""


class _PromptFields(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Fields both endpoints share: what makes up the prompt."""

    model: ModelName
    messages: Annotated[list[MessageParam], Meta(min_length=1, max_length=MAX_MESSAGES)]
    system: SystemParam = None
    tools: Annotated[list[Raw], Meta(max_length=MAX_TOOLS)] | None = None
    tool_choice: ToolChoiceParam | None = None
    thinking: ThinkingParam | None = None
    cache_control: CacheControl | None = None


class MessagesRequest(_PromptFields, forbid_unknown_fields=True, kw_only=True):
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


class CountTokensRequest(_PromptFields, forbid_unknown_fields=True, kw_only=True):
    """A decoded, validated ``POST /v1/messages/count_tokens`` body.

    Produced only by :func:`decode_count_tokens_request`.
    """


# --- decoding ------------------------------------------------------------------

_messages_decoder = msgspec.json.Decoder(MessagesRequest)
_count_decoder = msgspec.json.Decoder(CountTokensRequest)
_tool_kind_decoder = msgspec.json.Decoder(_ToolKind)
_tool_decoder = msgspec.json.Decoder(CustomTool)
_encoder = msgspec.json.Encoder()

_AT = re.compile(r"^(?P<msg>.*?) - at `\$(?P<path>[^`]*)`$", re.DOTALL)
_FIELD = re.compile(r"^Object (?P<what>contains unknown|missing required) field `(?P<name>[^`]*)`$")


def _join(base: str, name: str) -> str:
    """Return ``base.name`` (``name`` when ``base`` is the root; ``base[i]``
    for an index ``name`` that starts with ``[``)."""
    if not base:
        return name
    return base + name if name.startswith("[") else f"{base}.{name}"


def _invalid(param: str, problem: str) -> APIError:
    """A 400 about ``param`` whose message starts with the field path."""
    return bad_request(f"{param}: {problem}" if param else problem, param or None)


def _validation_error(exc: msgspec.ValidationError, base: str = "") -> APIError:
    """Translate a msgspec validation error into a 400 naming its field.

    msgspec reports ``"<problem> - at `$.a[0].b`"``; the path, prefixed by
    ``base``, becomes ``param``. Unknown and missing fields get Anthropic's
    wording ("Extra inputs are not permitted", "Field required").
    """
    text = str(exc)
    match = _AT.match(text)
    problem, path = (match["msg"], match["path"]) if match else (text, "")
    path = _join(base, path.lstrip(".")) if path else base
    field = _FIELD.match(problem)
    if field is not None:
        param = _join(path, field["name"])
        if field["what"] == "contains unknown":
            return _invalid(param, "Extra inputs are not permitted")
        return _invalid(param, "Field required")
    if not path and problem.startswith("Expected `object`"):
        return bad_request("The request body must be a JSON object")
    return _invalid(path, problem)


def _decode(decoder: msgspec.json.Decoder, data: bytes, base: str = "") -> Any:
    """Decode ``data`` with ``decoder`` (see
    :func:`~gateway.openai_schema.decode_body`), reporting invalid fields in
    Anthropic's wording with ``base`` prefixing their paths.

    Raises:
        APIError: 400 for an empty body, malformed JSON, a non-object, or
        invalid fields.
    """
    return decode_body(decoder, data, lambda exc: _validation_error(exc, base))


def decode_messages_request(body: bytes) -> MessagesRequest:
    """Decode and fully validate a ``POST /v1/messages`` body.

    Raises:
        APIError: 400 with ``param`` naming the first offending field.
    """
    req: MessagesRequest = _decode(_messages_decoder, body)
    _check_prompt(req)
    thinking = req.thinking
    if isinstance(thinking, ThinkingEnabled) and isinstance(req.tool_choice, (ToolChoiceAny, ToolChoiceTool)):
        raise _invalid(
            "tool_choice",
            f"tool_choice '{_choice_type(req.tool_choice)}' forces tool use, which cannot be combined with thinking "
            "(use 'auto' or 'none')",
        )
    if isinstance(thinking, ThinkingEnabled) and thinking.budget_tokens >= req.max_tokens:
        raise _invalid(
            "thinking.budget_tokens",
            f"must be less than max_tokens ({req.max_tokens}), got {thinking.budget_tokens}",
        )
    return req


def decode_count_tokens_request(body: bytes) -> CountTokensRequest:
    """Decode and fully validate a ``POST /v1/messages/count_tokens`` body.

    Raises:
        APIError: 400 with ``param`` naming the first offending field.
    """
    req: CountTokensRequest = _decode(_count_decoder, body)
    _check_prompt(req)
    return req


# --- checks beyond what the types express ----------------------------------------


def _not_supported(param: str, what: str) -> APIError:
    """A 400 saying ``what`` is not supported."""
    return _invalid(param, f"{what} is not supported")


def _is_null(raw: Raw) -> bool:
    """Whether ``raw`` is the JSON ``null``."""
    return bytes(raw).strip() == b"null"


def _check_prompt(req: _PromptFields) -> None:
    """Checks shared by both endpoints: system, tools, tool choice, messages.

    Raises:
        APIError: 400 naming the field.
    """
    if isinstance(req.system, list):
        for index, block in enumerate(req.system):
            _check_text(block, f"system[{index}]")
    names = [tool.name for tool in custom_tools(req)]
    _check_tool_choice(req.tool_choice, names)
    _check_messages(req.messages)
    if prefilled(req):
        _check_prefill(req)


def prefilled(req: _PromptFields) -> bool:
    """Whether the request ends with an assistant turn to continue."""
    return req.messages[-1].role == "assistant"


def _check_prefill(req: _PromptFields) -> None:
    """A final assistant turn must be text only, not end with whitespace,
    and come without enabled thinking or a forced tool choice.

    Raises:
        APIError: 400 naming the field.
    """
    last = len(req.messages) - 1
    message = req.messages[last]
    for number, block in enumerate(_blocks(message)):
        if not isinstance(block, TextBlock):
            tag = type(block).__struct_config__.tag
            raise _not_supported(
                f"messages[{last}].content[{number}].type",
                f"'{tag}' blocks in a final (pre-filled) assistant turn",
            )
    text = message.content if isinstance(message.content, str) else _text_of(message.content)  # type: ignore[arg-type]
    if text != text.rstrip():
        raise _invalid(f"messages[{last}].content", "final assistant content cannot end with trailing whitespace")
    if isinstance(req.thinking, ThinkingEnabled):
        raise _invalid("thinking", "a final assistant turn (pre-filled response) cannot be used with thinking enabled")
    if isinstance(req.tool_choice, (ToolChoiceAny, ToolChoiceTool)):
        raise _not_supported("tool_choice", f"tool_choice '{_choice_type(req.tool_choice)}' with a pre-filled response")


def custom_tools(req: _PromptFields) -> list[CustomTool]:
    """Decode the request's ``tools`` (empty when absent).

    Raises:
        APIError: 400 for a server tool (any ``type`` other than
        ``custom``), an invalid tool, an ``input_schema`` that is not an
        object schema, or a repeated name.
    """
    tools: list[CustomTool] = []
    seen: set[str] = set()
    for index, raw in enumerate(req.tools or ()):
        path = f"tools[{index}]"
        tool = _decode_tool(bytes(raw), path)
        if tool.name in seen:
            raise _invalid(f"{path}.name", f"tool name '{tool.name}' is used more than once")
        seen.add(tool.name)
        tools.append(tool)
    return tools


def _decode_tool(raw: bytes, path: str) -> CustomTool:
    """Decode one element of ``tools``.

    Raises:
        APIError: 400 as :func:`custom_tools` describes.
    """
    kind = _decode(_tool_kind_decoder, raw, path).type
    if kind not in (None, "custom"):
        shown = kind if isinstance(kind, str) else _encoder.encode(kind).decode()
        raise _not_supported(f"{path}.type", f"tool type '{shown}' (server tools)")
    tool: CustomTool = _decode(_tool_decoder, raw, path)
    if tool.input_schema.get("type") != "object":
        raise _invalid(f"{path}.input_schema.type", "must be 'object'")
    return tool


def _check_tool_choice(choice: ToolChoiceParam | None, names: list[str]) -> None:
    """``any`` and ``tool`` need tools; ``tool`` must name one of them.

    Raises:
        APIError: 400 param ``tool_choice`` / ``tool_choice.name``.
    """
    if isinstance(choice, (ToolChoiceAny, ToolChoiceTool)) and not names:
        raise _invalid("tool_choice", f"tool_choice type '{_choice_type(choice)}' requires 'tools'")
    if isinstance(choice, ToolChoiceTool) and choice.name not in names:
        raise _invalid("tool_choice.name", f"no tool named '{choice.name}' in 'tools'")


def _choice_type(choice: ToolChoiceParam) -> str:
    """The ``type`` tag of a tool choice."""
    return type(choice).__struct_config__.tag  # type: ignore[return-value]


def _check_messages(messages: list[MessageParam]) -> None:
    """Roles, blocks per role and tool-result ids.

    Raises:
        APIError: 400 naming e.g. ``messages[2].content[0].type``.
    """
    tool_use_ids: set[str] = set()
    for index, message in enumerate(messages):
        path = f"messages[{index}]"
        if message.role not in ("user", "assistant"):
            raise _invalid(
                f"{path}.role",
                f"role must be 'user' or 'assistant', got '{message.role}'"
                " (system instructions go in the top-level 'system' field)",
            )
        for number, block in enumerate(_blocks(message)):
            _check_block(block, message.role, f"{path}.content[{number}]", tool_use_ids)


def _blocks(message: MessageParam) -> list[ContentBlock]:
    """The message's blocks (none for string content)."""
    return [] if isinstance(message.content, str) else message.content


def _check_block(block: ContentBlock, role: str, path: str, tool_use_ids: set[str]) -> None:
    """Check one block of a ``role`` turn; record tool_use ids, check tool
    results against them.

    Raises:
        APIError: 400 for an unsupported block, a block the role may not
        send, or a tool result without its tool use.
    """
    kind = _UNSUPPORTED_BLOCKS.get(type(block))
    if kind is not None:
        raise _not_supported(f"{path}.type", f"content block type '{kind}'")
    allowed = _USER_BLOCKS if role == "user" else _ASSISTANT_BLOCKS
    if not isinstance(block, allowed):
        tag = type(block).__struct_config__.tag
        raise _invalid(f"{path}.type", f"'{tag}' blocks are not allowed in {role} turns")
    if isinstance(block, TextBlock):
        _check_text(block, path)
    elif isinstance(block, ToolUseBlock):
        _check_tool_use(block, path)
        tool_use_ids.add(block.id)
    elif isinstance(block, ToolResultBlock):
        _check_tool_result(block, path, tool_use_ids)


def _check_text(block: TextBlock, path: str) -> None:
    """Accept only null or empty ``citations``.

    Raises:
        APIError: 400 param ``<path>.citations``.
    """
    if not _is_null(block.citations) and msgspec.json.decode(block.citations) != []:
        raise _not_supported(f"{path}.citations", "citations")


def _check_tool_use(block: ToolUseBlock, path: str) -> None:
    """Accept only a direct ``caller`` and no ``toolset_name``.

    Raises:
        APIError: 400 naming the field.
    """
    if not _is_null(block.caller) and msgspec.json.decode(block.caller) != {"type": "direct"}:
        raise _not_supported(f"{path}.caller", "a tool_use 'caller' other than direct")
    if not _is_null(block.toolset_name):
        raise _not_supported(f"{path}.toolset_name", "toolsets")


def _check_tool_result(block: ToolResultBlock, path: str, tool_use_ids: set[str]) -> None:
    """The result must answer an earlier tool use and hold only text.

    Raises:
        APIError: 400 naming ``tool_use_id`` or the offending content block.
    """
    if block.tool_use_id not in tool_use_ids:
        raise _invalid(
            f"{path}.tool_use_id",
            f"no tool_use block with id '{block.tool_use_id}' in an earlier assistant turn",
        )
    if isinstance(block.content, list):
        for number, item in enumerate(block.content):
            item_path = f"{path}.content[{number}]"
            if not isinstance(item, TextBlock):
                kind = _UNSUPPORTED_BLOCKS[type(item)]
                raise _not_supported(f"{item_path}.type", f"content block type '{kind}' in a tool result")
            _check_text(item, item_path)


# --- translation ---------------------------------------------------------------


def _text_of(content: str | list[TextBlock] | None) -> str:
    """Text content as one string (text blocks concatenated)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(block.text for block in content)


def _tool_result_message(block: ToolResultBlock, names: dict[str, str]) -> ChatMessage:
    """The ``tool`` turn for one tool result (``name`` from its tool use)."""
    text = _text_of(block.content)  # type: ignore[arg-type]  # checked: text only
    if block.is_error:
        text = TOOL_ERROR_PREFIX + text
    return ChatMessage(role="tool", content=text, tool_call_id=block.tool_use_id, name=names.get(block.tool_use_id))


def _user_messages(message: MessageParam, names: dict[str, str]) -> list[ChatMessage]:
    """A user turn: one ``tool`` message per tool result, in order, then one
    ``user`` message with its text (when it has text or no tool results)."""
    if isinstance(message.content, str):
        return [ChatMessage(role="user", content=message.content)]
    results = [b for b in message.content if isinstance(b, ToolResultBlock)]
    texts = [b for b in message.content if isinstance(b, TextBlock)]
    out = [_tool_result_message(block, names) for block in results]
    if texts or not results:
        out.append(ChatMessage(role="user", content=_text_of(texts)))
    return out


def _assistant_message(message: MessageParam, names: dict[str, str]) -> ChatMessage:
    """An assistant turn: text, reasoning (thinking blocks) and tool calls
    (``arguments`` the JSON text of ``input``); records tool names by id."""
    if isinstance(message.content, str):
        return ChatMessage(role="assistant", content=message.content)
    blocks = message.content
    calls = [
        ToolCall(id=b.id, name=b.name, arguments=_encoder.encode(b.input).decode())
        for b in blocks
        if isinstance(b, ToolUseBlock)
    ]
    names.update((call.id, call.name) for call in calls)
    reasoning = "".join(b.thinking for b in blocks if isinstance(b, ThinkingBlock))
    return ChatMessage(
        role="assistant",
        content=_text_of([b for b in blocks if isinstance(b, TextBlock)]),
        tool_calls=calls or None,
        reasoning=reasoning or None,
    )


def chat_messages(req: _PromptFields) -> list[ChatMessage]:
    """The worker's messages for a validated request: the system text as a
    leading ``system`` message (when not empty), then every turn translated
    (see :func:`_user_messages` and :func:`_assistant_message`)."""
    out: list[ChatMessage] = []
    system = _text_of(req.system)
    if system:
        out.append(ChatMessage(role="system", content=system))
    names: dict[str, str] = {}
    for message in req.messages:
        if message.role == "user":
            out.extend(_user_messages(message, names))
        else:
            out.append(_assistant_message(message, names))
    return out


_TOOL_CHOICES: dict[type, ToolChoice] = {
    ToolChoiceAuto: "auto",
    ToolChoiceAny: "required",
    ToolChoiceTool: "function",
    ToolChoiceNone: "none",
}


def _tool_fields(req: _PromptFields) -> dict[str, Any]:
    """The GenerateRequest tool fields: ``tools`` (None when there are none),
    ``tool_choice`` (auto/required/function/none), ``tool_choice_name`` and
    ``parallel_tool_calls`` (False with ``disable_parallel_tool_use``)."""
    tools = [Tool(name=t.name, description=t.description or "", parameters=t.input_schema) for t in custom_tools(req)]
    choice = req.tool_choice
    return {
        "tools": tools or None,
        "tool_choice": "auto" if choice is None else _TOOL_CHOICES[type(choice)],
        "tool_choice_name": choice.name if isinstance(choice, ToolChoiceTool) else None,
        "parallel_tool_calls": not getattr(choice, "disable_parallel_tool_use", None),
    }


def _thinking(req: _PromptFields) -> bool | None:
    """``thinking``: True when enabled, False when disabled, None when absent."""
    if req.thinking is None:
        return None
    return isinstance(req.thinking, ThinkingEnabled)


def _thinking_budget(req: _PromptFields) -> int | None:
    """``thinking.budget_tokens`` when thinking is enabled, else None."""
    return req.thinking.budget_tokens if isinstance(req.thinking, ThinkingEnabled) else None


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


def to_generate_request(req: MessagesRequest, request_id: str) -> GenerateRequest:
    """Translate a validated messages request into the worker's request
    (one choice; ``timeout`` left for the engine to fill in)."""
    return GenerateRequest(
        request_id=request_id,
        sampling=_sampling(req),
        messages=chat_messages(req),
        thinking=_thinking(req),
        thinking_budget=_thinking_budget(req),
        continue_final=prefilled(req),
        **_tool_fields(req),
    )


def to_count_request(req: CountTokensRequest, request_id: str) -> GenerateRequest:
    """Translate a validated count-tokens request into a ``count_only``
    worker request rendering the same prompt."""
    return GenerateRequest(
        request_id=request_id,
        sampling=SamplingParams(),
        messages=chat_messages(req),
        thinking=_thinking(req),
        count_only=True,
        continue_final=prefilled(req),
        **_tool_fields(req),
    )
