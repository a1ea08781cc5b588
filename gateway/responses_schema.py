"""Request bodies of ``POST /v1/responses`` (the OpenAI Responses API).

Decoding is as strict as for chat (:mod:`gateway.openai_schema`): one JSON
object, no coercion, bounds on every number, string and list, unknown
fields refused by name; every refusal is an :class:`~gateway.errors.APIError`
400 whose ``param`` is the offending field path (e.g. ``input[2].content``).

mlxd is stateless: nothing is stored, so ``previous_response_id``,
``conversation`` and ``background`` are refused and the client sends the
whole conversation as ``input`` every time (``store`` is accepted, either
value, and the response says ``store: false``; ``GET /v1/responses/{id}``
does not exist).

Supported:

- ``input``: a string (one user message) or a non-empty list of items:
  messages ``{"role": "user"|"system"|"developer"|"assistant", "content":
  string or parts}`` (``"type": "message"`` optional; user/system/developer
  parts are ``input_text``; assistant parts ``output_text``, ``refusal`` or
  ``input_text``), ``function_call`` items (``call_id``, ``name``,
  ``arguments``), ``function_call_output`` items (``call_id``, ``output`` as
  text or ``input_text`` parts) and ``reasoning`` items (their
  ``reasoning_text`` content, else their ``summary_text`` summary).
  Images, files, encrypted reasoning and all other item types are refused.
- ``instructions``: a system message before ``input`` (merged with a
  leading system message of ``input``).
- ``max_output_tokens`` (1..1,000,000), ``temperature`` (0..2), ``top_p``
  (0 < p <= 1).
- ``tools``: up to 128 ``{"type": "function", "name", "description",
  "parameters", "strict"}`` (names 1..64 of ``[A-Za-z0-9_-]``, unique;
  ``parameters`` a JSON object). Other OpenAI tool types are refused.
- ``tool_choice``: ``"none"``, ``"auto"``, ``"required"`` or ``{"type":
  "function", "name"}`` naming one of ``tools``; anything but ``"none"``
  needs tools. Default ``"auto"`` with tools, else ``"none"``.
  ``parallel_tool_calls`` (default true) is forwarded. ``max_tool_calls``
  (>= 1) caps the function calls of one response: a forced choice ends
  the turn after that many (without it, the model's
  ``max_tool_calls_per_turn``), and under ``auto`` later calls are dropped.
- ``text.format``: ``text``, ``json_object`` or ``json_schema`` (``name``
  1..64 characters and ``schema``, a JSON object, required).
- ``reasoning.effort``: ``none``/``minimal`` turn the model's reasoning
  mode off, ``low``/``medium``/``high``/``xhigh``/``max`` on (no budget).
- Echo-only: ``metadata`` (up to 16 pairs, keys up to 64 and values up to
  512 characters), ``user``, ``safety_identifier``, ``prompt_cache_key``
  (prefix caching is automatic), ``service_tier`` (null or ``auto``),
  ``stream_options.include_obfuscation`` (no obfuscation is ever added).
- Accepted only with their neutral value: ``truncation`` (``disabled``),
  ``include`` (empty), ``top_logprobs`` (0), ``text.verbosity``, ``reasoning.summary`` and
  ``reasoning.generate_summary`` (null).

:func:`to_generate_request` turns a decoded request into the worker's
:class:`~shared.protocol.GenerateRequest` (one choice) and
:func:`response_settings` gives the settings the response echoes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Union

import msgspec
from msgspec import UNSET, Meta, Raw, UnsetType

from gateway.errors import APIError, bad_request
from gateway.openai_schema import (
    MAX_CONTENT_PARTS,
    MAX_TOOLS,
    MAX_TOP_LOGPROBS,
    Identifier,
    JSONObject,
    MaxTokens,
    ModelName,
    SchemaName,
    ShortText,
    Temperature,
    Text,
    ToolName,
    TopP,
    check_finite,
    check_tool_choice,
    decode_body,
)
from gateway.openai_schema import THINKING_BY_EFFORT as _CHAT_THINKING_BY_EFFORT
from gateway.responses_format import (
    FunctionToolEcho,
    ReasoningEcho,
    ResponseSettings,
    TextEcho,
    TextFormatEcho,
    ToolChoiceFunctionEcho,
)
from shared.protocol import (
    ChatMessage,
    GenerateRequest,
    ResponseFormat,
    SamplingParams,
    Tool,
    ToolCall,
    ToolChoice,
)

MAX_INPUT_ITEMS = 4096
"""Most items in ``input``."""
MAX_METADATA = 16
"""Most ``metadata`` pairs."""
MAX_METADATA_KEY_CHARS = 64
"""Longest ``metadata`` key."""
MAX_METADATA_VALUE_CHARS = 512
"""Longest ``metadata`` value."""
MAX_TOOL_CALLS = 2**31 - 1
"""Type bound of ``max_tool_calls``."""
MAX_INCLUDE = 64
"""Type bound of ``include`` (which must be empty anyway)."""

# --- field types (the rest as for chat, from gateway.openai_schema) -------------------

Metadata = Annotated[
    dict[
        Annotated[str, Meta(max_length=MAX_METADATA_KEY_CHARS)],
        Annotated[str, Meta(max_length=MAX_METADATA_VALUE_CHARS)],
    ],
    Meta(max_length=MAX_METADATA),
]


class ContentPartParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One content part of an input item (message content, reasoning
    content or summary, function-call output).

    Every field of the OpenAI part types is recognised so a part is judged
    by its ``type`` (see :data:`_PART_FIELDS`); images, files and audio are
    refused by type.
    """

    type: ShortText
    text: Text | UnsetType = UNSET
    refusal: Text | UnsetType = UNSET
    annotations: Raw | UnsetType = UNSET
    logprobs: Raw | UnsetType = UNSET
    prompt_cache_breakpoint: Raw | UnsetType = UNSET
    image_url: Raw | UnsetType = UNSET
    file_id: Raw | UnsetType = UNSET
    detail: Raw | UnsetType = UNSET
    file_data: Raw | UnsetType = UNSET
    file_url: Raw | UnsetType = UNSET
    filename: Raw | UnsetType = UNSET
    input_audio: Raw | UnsetType = UNSET


Parts = Annotated[list[ContentPartParam], Meta(max_length=MAX_CONTENT_PARTS)]


class InputItemParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One element of ``input``: the union of the fields of the supported
    item types, judged by ``type`` (absent: a message) against
    :data:`_ITEM_FIELDS`; a null field counts as absent."""

    type: ShortText | UnsetType = UNSET
    role: ShortText | UnsetType = UNSET
    content: Union[Text, Parts, None, UnsetType] = UNSET
    id: ShortText | None | UnsetType = UNSET
    status: ShortText | None | UnsetType = UNSET
    phase: ShortText | None | UnsetType = UNSET
    call_id: Identifier | None | UnsetType = UNSET
    name: ShortText | None | UnsetType = UNSET
    arguments: Text | UnsetType = UNSET
    output: Union[Text, Parts, UnsetType] = UNSET
    summary: Parts | UnsetType = UNSET
    encrypted_content: Text | None | UnsetType = UNSET


class FunctionToolParam(msgspec.Struct, tag_field="type", tag="function", forbid_unknown_fields=True, kw_only=True):
    """A ``tools`` entry of type ``function``; ``parameters`` is its JSON
    Schema (null or absent: no parameters)."""

    name: ToolName
    description: Text | None = None
    parameters: JSONObject | None = None
    strict: bool | None = None


_OTHER_TOOL_TYPES = (
    "file_search",
    "computer",
    "computer_use_preview",
    "web_search",
    "web_search_2025_08_26",
    "web_search_preview",
    "web_search_preview_2025_03_11",
    "mcp",
    "code_interpreter",
    "programmatic_tool_calling",
    "image_generation",
    "local_shell",
    "shell",
    "custom",
    "namespace",
    "tool_search",
    "apply_patch",
)
"""OpenAI tool types mlxd recognises only to refuse them by type."""

_OtherTools = tuple(
    msgspec.defstruct(f"UnsupportedTool_{kind}", [], tag_field="type", tag=kind) for kind in _OTHER_TOOL_TYPES
)
ToolParam = Union[(FunctionToolParam, *_OtherTools)]  # type: ignore[valid-type]
"""A ``tools`` entry: a function tool, or one of the refused types."""


class ToolChoiceParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """An object ``tool_choice``: only ``{"type": "function", "name"}`` is
    supported; the fields of the other OpenAI forms are recognised so they
    are refused by type."""

    type: ShortText
    name: ShortText | UnsetType = UNSET
    mode: Raw | UnsetType = UNSET
    tools: Raw | UnsetType = UNSET
    server_label: Raw | UnsetType = UNSET


class TextFormatParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``text.format``: ``type`` ``text``, ``json_object`` or ``json_schema``
    (only the latter with ``name``, ``schema``, ``description``, ``strict``)."""

    type: ShortText
    name: SchemaName | UnsetType = UNSET
    schema: JSONObject | UnsetType = UNSET
    description: Text | None | UnsetType = UNSET
    strict: bool | None | UnsetType = UNSET


class TextParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``text``: the output ``format``; ``verbosity`` only null."""

    format: TextFormatParam | None = None
    verbosity: ShortText | None = None


class ReasoningParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``reasoning``: ``effort`` picks thinking on/off; summaries only null."""

    effort: ShortText | None = None
    summary: ShortText | None = None
    generate_summary: ShortText | None = None


class StreamOptionsParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``stream_options``: ``include_obfuscation`` is accepted; mlxd never
    adds obfuscation."""

    include_obfuscation: bool | None = None


class ResponsesRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A decoded, validated ``POST /v1/responses`` body.

    Produced only by :func:`decode_responses_request`, which guarantees
    every constraint in the module docstring.
    """

    model: ModelName
    input: Union[Text, Annotated[list[InputItemParam], Meta(max_length=MAX_INPUT_ITEMS)]]
    instructions: Text | None = None
    max_output_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    tools: Annotated[list[ToolParam], Meta(max_length=MAX_TOOLS)] | None = None
    tool_choice: Union[ShortText, ToolChoiceParam, None] = None
    parallel_tool_calls: bool | None = None
    max_tool_calls: Annotated[int, Meta(ge=1, le=MAX_TOOL_CALLS)] | None = None
    text: TextParam | None = None
    reasoning: ReasoningParam | None = None
    stream: bool | None = None
    stream_options: StreamOptionsParam | None = None
    store: bool | None = None
    background: bool | None = None
    previous_response_id: ShortText | None = None
    conversation: Raw | None = None
    prompt: Raw | None = None
    metadata: Metadata | None = None
    user: ShortText | None = None
    safety_identifier: ShortText | None = None
    prompt_cache_key: ShortText | None = None
    truncation: ShortText | None = None
    include: Annotated[list[ShortText], Meta(max_length=MAX_INCLUDE)] | None = None
    top_logprobs: Annotated[int, Meta(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    service_tier: ShortText | None = None


_decoder = msgspec.json.Decoder(ResponsesRequest)


def decode_responses_request(body: bytes) -> ResponsesRequest:
    """Decode and fully validate a ``POST /v1/responses`` body.

    Raises:
        APIError: 400 with ``param`` naming the first offending field.
    """
    req: ResponsesRequest = decode_body(_decoder, body)
    _check_settings(req)
    _check_tools(req)
    _check_text(req.text)
    _check_input(req.input)
    return req


# --- checks -----------------------------------------------------------------------------


def _not_supported(param: str, what: str) -> APIError:
    """A 400 saying ``what`` is not supported."""
    return bad_request(f"{what} is not supported", param)


def _given(value: object) -> bool:
    """Whether an optional field was sent with a value (null counts as not)."""
    if value is UNSET or value is None:
        return False
    return not (isinstance(value, Raw) and bytes(value) == b"null")


def _stateless(name: str) -> APIError:
    """The 400 for a field that needs stored state (``name``)."""
    return bad_request(f"stateless server: {name} is not supported; send the full input", name)


def _check_settings(req: ResponsesRequest) -> None:
    """Check the sampling numbers, refuse what needs stored state, and check
    the fields accepted only when neutral and ``reasoning``.

    Raises:
        APIError: 400 naming the field.
    """
    check_finite(req, ("temperature", "top_p"))
    if req.previous_response_id is not None:
        raise _stateless("previous_response_id")
    if _given(req.conversation):
        raise _stateless("conversation")
    if req.background:
        raise _not_supported("background", "background mode (mlxd is stateless)")
    if _given(req.prompt):
        raise _not_supported("prompt", "'prompt' (stored prompt templates)")
    if req.stream_options is not None and req.stream is not True:
        raise bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options")
    _check_neutral(req)
    _check_reasoning(req.reasoning)


def _check_neutral(req: ResponsesRequest) -> None:
    """Fields accepted only with their neutral value.

    Raises:
        APIError: 400 naming the field.
    """
    if req.truncation not in (None, "disabled"):
        raise _not_supported("truncation", f"truncation '{req.truncation}'")
    if req.include:
        raise _not_supported("include[0]", f"include '{req.include[0]}'")
    if req.top_logprobs not in (None, 0):
        raise _not_supported("top_logprobs", "'top_logprobs' (log-probabilities)")
    if req.service_tier not in (None, "auto"):
        raise _not_supported("service_tier", f"service_tier '{req.service_tier}'")


THINKING_BY_EFFORT = {**_CHAT_THINKING_BY_EFFORT, "xhigh": True, "max": True}
"""``reasoning.effort`` -> whether the model's reasoning mode is on: the
chat ``reasoning_effort`` values plus ``xhigh`` and ``max``."""


def _check_reasoning(reasoning: ReasoningParam | None) -> None:
    """``reasoning.effort`` must be known; summaries are not produced.

    Raises:
        APIError: 400 naming the ``reasoning`` field.
    """
    if reasoning is None:
        return
    if reasoning.effort is not None and reasoning.effort not in THINKING_BY_EFFORT:
        raise bad_request(
            f"Invalid value for 'reasoning.effort': '{reasoning.effort}'; "
            f"expected one of {', '.join(THINKING_BY_EFFORT)}",
            "reasoning.effort",
        )
    for name in ("summary", "generate_summary"):
        if getattr(reasoning, name) is not None:
            raise _not_supported(f"reasoning.{name}", "reasoning summaries")


def _tool_kind(tool: object) -> str:
    """The ``type`` of a decoded ``tools`` entry."""
    return type(tool).__struct_config__.tag  # type: ignore[attr-defined]


def _check_tools(req: ResponsesRequest) -> None:
    """Only function tools, with unique names; a valid ``tool_choice``.

    Raises:
        APIError: 400 naming ``tools[i].type``, ``tools[i].name`` or the
        offending part of ``tool_choice``.
    """
    names: set[str] = set()
    for index, tool in enumerate(req.tools or ()):
        if not isinstance(tool, FunctionToolParam):
            raise bad_request(
                f"Tool type '{_tool_kind(tool)}' is not supported; only 'function' tools are", f"tools[{index}].type"
            )
        if tool.name in names:
            raise bad_request(f"Tool name '{tool.name}' is used twice", f"tools[{index}].name")
        names.add(tool.name)
    check_tool_choice(req.tool_choice, names, _chosen_function, "tool_choice.name")


def _chosen_function(choice: ToolChoiceParam) -> str:
    """The function an object ``tool_choice`` forces; it must be exactly
    ``{"type": "function", "name"}``.

    Raises:
        APIError: 400 param ``tool_choice.type`` (another type) or
        ``tool_choice`` (no name, or fields of the other forms).
    """
    if choice.type != "function":
        raise bad_request(f"tool_choice type '{choice.type}' is not supported; only 'function' is", "tool_choice.type")
    if choice.name is UNSET or any(_given(getattr(choice, f)) for f in ("mode", "tools", "server_label")):
        raise bad_request('A function tool_choice is {"type": "function", "name": ...}', "tool_choice")
    return choice.name  # type: ignore[return-value]


_FORMATS = ("text", "json_object", "json_schema")


def _check_text(text: TextParam | None) -> None:
    """``text.format`` of a known type with the fields it needs;
    ``text.verbosity`` only null.

    Raises:
        APIError: 400 naming the ``text`` field.
    """
    if text is None:
        return
    if text.verbosity is not None:
        raise _not_supported("text.verbosity", "'text.verbosity'")
    fmt = text.format
    if fmt is None:
        return
    if fmt.type not in _FORMATS:
        raise bad_request(
            f"Invalid text.format type '{fmt.type}'; expected text, json_object or json_schema", "text.format.type"
        )
    extra = [name for name in ("name", "schema", "description", "strict") if _given(getattr(fmt, name))]
    if fmt.type != "json_schema" and extra:
        name = extra[0]
        raise bad_request(f"'{name}' is only allowed with text.format type 'json_schema'", f"text.format.{name}")
    if fmt.type == "json_schema":
        for name in ("name", "schema"):
            if getattr(fmt, name) is UNSET:
                raise bad_request(f"Missing required parameter: 'text.format.{name}'", f"text.format.{name}")


# --- input items ---------------------------------------------------------------------------

_PART_FIELDS = {
    "input_text": ("text", "prompt_cache_breakpoint"),
    "output_text": ("text", "annotations", "logprobs"),
    "refusal": ("refusal",),
    "reasoning_text": ("text",),
    "summary_text": ("text",),
}
"""Supported part types and the fields each may carry (the first is
required and holds its text)."""

_MEDIA_PARTS = ("input_image", "input_file", "input_audio")
"""Part types refused as not supported (rather than as invalid)."""

_USER_PARTS = ("input_text",)
_ASSISTANT_PARTS = ("output_text", "refusal", "input_text")

_ITEM_FIELDS = {
    "message": ("type", "role", "content", "id", "status", "phase"),
    "function_call": ("type", "call_id", "name", "arguments", "id", "status"),
    "function_call_output": ("type", "call_id", "output", "id", "status", "name"),
    "reasoning": ("type", "id", "summary", "content", "encrypted_content", "status"),
}
"""Supported item types and the fields each may carry."""

_REQUIRED_FIELDS = {
    "message": ("role", "content"),
    "function_call": ("call_id", "name", "arguments"),
    "function_call_output": ("call_id", "output"),
    "reasoning": (),
}

_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}


def _item_type(item: InputItemParam) -> str:
    """An item's type (``message`` when absent)."""
    return "message" if item.type is UNSET else item.type  # type: ignore[return-value]


def _check_input(value: str | list[InputItemParam]) -> None:
    """Check every input item.

    Raises:
        APIError: 400 naming ``input`` (empty list) or the offending field.
    """
    if isinstance(value, str):
        return
    if not value:
        raise bad_request("'input' must not be empty", "input")
    for index, item in enumerate(value):
        _check_item(item, f"input[{index}]")


def _check_item(item: InputItemParam, path: str) -> None:
    """Check one input item's type, fields and content.

    Raises:
        APIError: 400 naming the item's offending field.
    """
    kind = _item_type(item)
    if kind == "item_reference":
        raise _not_supported(f"{path}.type", "'item_reference' (mlxd is stateless; send the item itself)")
    if kind not in _ITEM_FIELDS:
        raise _not_supported(f"{path}.type", f"input item type '{kind}'")
    allowed = _ITEM_FIELDS[kind]
    for name in item.__struct_fields__:
        if name not in allowed and _given(getattr(item, name)):
            raise bad_request(f"Unrecognized field '{name}' in a '{kind}' item", f"{path}.{name}")
    for name in _REQUIRED_FIELDS[kind]:
        if not _given(getattr(item, name)):
            raise bad_request(f"Missing required parameter: '{path}.{name}'", f"{path}.{name}")
    check = _ITEM_CHECKS.get(kind)
    if check is not None:
        check(item, path)


def _check_message(item: InputItemParam, path: str) -> None:
    """A message's role and content parts."""
    if item.role not in _ROLES:
        raise bad_request(f"Invalid role '{item.role}'; expected one of {', '.join(_ROLES)}", f"{path}.role")
    allowed = _ASSISTANT_PARTS if item.role == "assistant" else _USER_PARTS
    _check_parts(item.content, allowed, f"{path}.content")  # type: ignore[arg-type]


def _check_function_output(item: InputItemParam, path: str) -> None:
    """A function call output is text or ``input_text`` parts."""
    _check_parts(item.output, _USER_PARTS, f"{path}.output")  # type: ignore[arg-type]


def _check_reasoning_item(item: InputItemParam, path: str) -> None:
    """Reasoning in the history: readable text only, never encrypted."""
    if _given(item.encrypted_content):
        raise _not_supported(f"{path}.encrypted_content", "encrypted reasoning content")
    if isinstance(item.content, str):
        raise bad_request("A reasoning item's 'content' must be a list of reasoning_text parts", f"{path}.content")
    for name, kind in (("content", "reasoning_text"), ("summary", "summary_text")):
        parts = getattr(item, name)
        _check_parts(parts if _given(parts) else [], (kind,), f"{path}.{name}")


_ITEM_CHECKS = {
    "message": _check_message,
    "function_call_output": _check_function_output,
    "reasoning": _check_reasoning_item,
}


def _check_parts(content: str | list[ContentPartParam], allowed: tuple[str, ...], path: str) -> None:
    """Check the parts of ``content`` (a string is always fine) against the
    part types ``allowed`` here.

    Raises:
        APIError: 400 naming ``path[i].type`` or a field of the part.
    """
    if isinstance(content, str):
        return
    for index, part in enumerate(content):
        where = f"{path}[{index}]"
        if part.type in _MEDIA_PARTS:
            raise _not_supported(f"{where}.type", f"content part type '{part.type}' (mlxd is text-only)")
        if part.type not in allowed:
            raise bad_request(
                f"Invalid content part type '{part.type}' here; expected {', '.join(allowed)}", f"{where}.type"
            )
        fields = _PART_FIELDS[part.type]
        for name in part.__struct_fields__:
            if name != "type" and name not in fields and _given(getattr(part, name)):
                raise bad_request(f"Unrecognized field '{name}' in a '{part.type}' part", f"{where}.{name}")
        if getattr(part, fields[0]) is UNSET:
            raise bad_request(f"Missing required parameter: '{where}.{fields[0]}'", f"{where}.{fields[0]}")


# --- translation ---------------------------------------------------------------------------


def _part_text(part: ContentPartParam) -> str:
    """The text a part carries (its ``text``, or a refusal's ``refusal``)."""
    value = part.refusal if part.type == "refusal" else part.text
    return "" if value is UNSET else value  # type: ignore[return-value]


def _flatten(content: object) -> str:
    """Text content, or the concatenated text of its parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(_part_text(part) for part in content)


def _reasoning_text(item: InputItemParam) -> str:
    """A reasoning item's text: its content, else its summary."""
    text = _flatten(item.content)
    return text if text else "\n".join(_part_text(p) for p in item.summary or ())  # type: ignore[union-attr]


@dataclass
class _AssistantTurn:
    """An assistant turn being gathered from consecutive items."""

    reasoning: list[str] = field(default_factory=list)
    content: str | None = None
    calls: list[ToolCall] = field(default_factory=list)

    @property
    def started(self) -> bool:
        """Whether the turn already has its text or a call."""
        return self.content is not None or bool(self.calls)

    def message(self) -> ChatMessage:
        """The turn as one assistant message."""
        return ChatMessage(
            role="assistant",
            content=self.content or "",
            tool_calls=self.calls or None,
            reasoning="\n".join(self.reasoning) if self.reasoning else None,
        )


class _History:
    """Turns input items into chat messages.

    Consecutive assistant-side items form one assistant turn in the order
    reasoning, message, function calls: a reasoning item after the turn
    has text or calls, or a second assistant message, starts a new turn.
    Any other item ends the turn. A ``function_call_output`` becomes a
    ``tool`` message; its ``name`` defaults to the earlier call's.
    """

    def __init__(self) -> None:
        self.messages: list[ChatMessage] = []
        self._turn: _AssistantTurn | None = None
        self._call_names: dict[str, str] = {}

    def add(self, item: InputItemParam) -> None:
        """Take the next input item."""
        kind = _item_type(item)
        if kind == "reasoning":
            self._reasoning(item)
        elif kind == "function_call":
            self._function_call(item)
        elif kind == "function_call_output":
            self._tool_output(item)
        elif item.role == "assistant":
            self._current_turn(new_if_started=True).content = _flatten(item.content)
        else:
            self._flush()
            role = _ROLES[item.role]  # type: ignore[index]
            self.messages.append(ChatMessage(role=role, content=_flatten(item.content)))

    def finish(self) -> list[ChatMessage]:
        """All messages, the last assistant turn included."""
        self._flush()
        return self.messages

    def _reasoning(self, item: InputItemParam) -> None:
        """A reasoning item opens (or joins) an assistant turn."""
        self._current_turn(new_if_started=True).reasoning.append(_reasoning_text(item))

    def _function_call(self, item: InputItemParam) -> None:
        """A function call joins the current assistant turn."""
        arguments = item.arguments if isinstance(item.arguments, str) else ""
        call = ToolCall(id=item.call_id or "", name=item.name or "", arguments=arguments)
        self._call_names[call.id] = call.name
        self._current_turn(new_if_started=False).calls.append(call)

    def _tool_output(self, item: InputItemParam) -> None:
        """A function call output becomes a ``tool`` message (ending any
        assistant turn)."""
        self._flush()
        call_id = item.call_id or ""
        name = item.name or self._call_names.get(call_id)
        self.messages.append(ChatMessage(role="tool", content=_flatten(item.output), tool_call_id=call_id, name=name))

    def _current_turn(self, *, new_if_started: bool) -> _AssistantTurn:
        """The current assistant turn; a new one if there is none, or if
        ``new_if_started`` and the current one already has text or calls."""
        if self._turn is not None and new_if_started and self._turn.started:
            self._flush()
        if self._turn is None:
            self._turn = _AssistantTurn()
        return self._turn

    def _flush(self) -> None:
        """Emit the current assistant turn, if any."""
        if self._turn is not None:
            self.messages.append(self._turn.message())
            self._turn = None


def _messages(req: ResponsesRequest) -> list[ChatMessage]:
    """``instructions`` and ``input`` as chat messages."""
    if isinstance(req.input, str):
        messages = [ChatMessage(role="user", content=req.input)]
    else:
        history = _History()
        for item in req.input:
            history.add(item)
        messages = history.finish()
    if req.instructions is None:
        return messages
    if messages and messages[0].role == "system":
        merged = f"{req.instructions}\n\n{messages[0].content}"
        return [ChatMessage(role="system", content=merged), *messages[1:]]
    return [ChatMessage(role="system", content=req.instructions), *messages]


def _function_tools(req: ResponsesRequest) -> list[FunctionToolParam]:
    """The request's function tools (all of them, once validated)."""
    return [tool for tool in req.tools or () if isinstance(tool, FunctionToolParam)]


def _tools(req: ResponsesRequest) -> list[Tool] | None:
    """The tools for the worker (None when there are none)."""
    tools = [
        Tool(name=t.name, description=t.description or "", parameters=dict(t.parameters or {}))
        for t in _function_tools(req)
    ]
    return tools or None


def _tool_choice(req: ResponsesRequest) -> tuple[ToolChoice, str | None]:
    """``(tool_choice, tool_choice_name)`` for the worker."""
    choice = req.tool_choice
    if isinstance(choice, ToolChoiceParam):
        return "function", choice.name  # type: ignore[return-value]
    if choice is None:
        return ("auto" if _function_tools(req) else "none"), None
    return choice, None  # type: ignore[return-value]


def _response_format(req: ResponsesRequest) -> ResponseFormat | None:
    """``text.format`` for the worker (None for plain text)."""
    fmt = req.text.format if req.text is not None else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return ResponseFormat(type="json_object")
    return ResponseFormat(type="json_schema", schema=fmt.schema, strict=bool(fmt.strict))  # type: ignore[arg-type]


def _thinking(req: ResponsesRequest) -> bool | None:
    """Whether to turn the reasoning mode on (None: the template default)."""
    effort = req.reasoning.effort if req.reasoning is not None else None
    return None if effort is None else THINKING_BY_EFFORT[effort]


def to_generate_request(req: ResponsesRequest, request_id: str) -> GenerateRequest:
    """Translate a validated request into the worker's ``GenerateRequest``
    (one choice; ``max_tokens`` None when ``max_output_tokens`` is unset;
    ``timeout`` left for the engine)."""
    choice, choice_name = _tool_choice(req)
    return GenerateRequest(
        request_id=request_id,
        sampling=SamplingParams(
            max_tokens=req.max_output_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
        ),
        messages=_messages(req),
        n=1,
        tools=_tools(req),
        tool_choice=choice,
        tool_choice_name=choice_name,
        parallel_tool_calls=req.parallel_tool_calls is not False,
        response_format=_response_format(req),
        thinking=_thinking(req),
        max_tool_calls=req.max_tool_calls,
    )


# --- echo -----------------------------------------------------------------------------------


def _text_echo(req: ResponsesRequest) -> TextEcho:
    """The response's ``text``."""
    fmt = req.text.format if req.text is not None else None
    if fmt is None:
        return TextEcho(format=TextFormatEcho(type="text"))
    return TextEcho(
        format=TextFormatEcho(
            type=fmt.type,
            name=None if fmt.name is UNSET else fmt.name,
            schema=None if fmt.schema is UNSET else fmt.schema,
            description=None if fmt.description is UNSET else fmt.description,
            strict=None if fmt.strict is UNSET else fmt.strict,
        )
    )


def response_settings(req: ResponsesRequest, sampling_defaults: dict[str, float] | None = None) -> ResponseSettings:
    """The settings the response object echoes for ``req`` (defaults where
    the request left them unset; ``temperature`` and ``top_p`` from the
    model's ``sampling_defaults`` when known, else 1)."""
    defaults = sampling_defaults or {}
    choice, choice_name = _tool_choice(req)
    echoed_choice: str | ToolChoiceFunctionEcho = choice
    if choice == "function":
        echoed_choice = ToolChoiceFunctionEcho(name=choice_name or "")
    return ResponseSettings(
        instructions=req.instructions,
        max_output_tokens=req.max_output_tokens,
        max_tool_calls=req.max_tool_calls,
        metadata=dict(req.metadata or {}),
        parallel_tool_calls=req.parallel_tool_calls is not False,
        reasoning=ReasoningEcho(effort=req.reasoning.effort if req.reasoning is not None else None),
        service_tier=req.service_tier,
        temperature=defaults.get("temperature", 1.0) if req.temperature is None else req.temperature,
        text=_text_echo(req),
        tool_choice=echoed_choice,
        tools=[
            FunctionToolEcho(name=t.name, description=t.description, parameters=t.parameters, strict=t.strict)
            for t in _function_tools(req)
        ],
        top_p=defaults.get("top_p", 1.0) if req.top_p is None else req.top_p,
        user=req.user,
        safety_identifier=req.safety_identifier,
        prompt_cache_key=req.prompt_cache_key,
    )
