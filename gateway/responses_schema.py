"""Request bodies of ``POST /v1/responses`` (the OpenAI Responses API).

Decoding is as strict as for chat (:mod:`gateway.openai_schema`): one JSON
object, no coercion, bounds on every number, string and list, unknown
fields refused by name; every refusal is an :class:`~gateway.errors.APIError`
400 whose ``param`` is the offending field path (e.g. ``input[2].content``).

mlxd is stateless: nothing is stored, so ``previous_response_id``,
``conversation``, ``background`` (and ``background_options``) and stored
``prompt`` templates are refused and the client sends the whole
conversation as ``input`` every time (``store`` is accepted, either value,
and the response says ``store: false``; ``GET /v1/responses/{id}`` does not
exist). ``docs/api/responses.md`` lists every field with its status; in
short:

- ``input``: a string (one user message) or a non-empty list of items:
  messages (``"type": "message"`` optional; user/system/developer parts
  are ``input_text``; assistant parts ``output_text``, ``refusal`` or
  ``input_text``), ``function_call`` / ``custom_tool_call`` items and their
  ``function_call_output`` / ``custom_tool_call_output`` (text or parts;
  an image or file in a tool's output reaches the model as a text
  placeholder, :data:`MEDIA_PLACEHOLDER`), ``reasoning`` items (text from
  mlxd's own ``encrypted_content``, else ``reasoning_text`` content, else
  the ``summary_text`` summary) and ``additional_tools`` items (their
  tools join ``tools``). Images and files elsewhere are refused; so is
  every other official item type, by type and with a reason
  (``_REFUSED_ITEMS``: ``item_reference``, the hosted and dropped built-in
  tools' call items, compaction, ``configuration_update``, MCP items
  outside :mod:`gateway.responses_mcp`).
- ``tools`` and ``tool_choice``: see :mod:`gateway.responses_tools`
  (function, custom and namespace tools; hosted ones dropped). An object
  ``tool_choice`` forces a ``function`` or ``custom`` tool by name, or
  restricts the tools (``allowed_tools``, mode ``auto`` / ``required``);
  one forcing a hosted tool is refused.
- Honoured: ``instructions``, ``max_output_tokens``, ``temperature``,
  ``top_p``, ``parallel_tool_calls``, ``text.format``, ``reasoning.effort``
  (``none``/``minimal`` off, the rest on; no budget), ``reasoning.summary``
  / ``generate_summary`` (the reasoning text becomes the reasoning item's
  summary), ``include: ["reasoning.encrypted_content"]`` (reasoning items
  carry :func:`gateway.encrypted_reasoning.seal` of their text),
  ``stream``, ``truncation: "disabled"``.
- Accepted, echoed or without effect by design: ``metadata``, ``user``,
  ``safety_identifier``, ``prompt_cache_key``, ``prompt_cache_options``,
  ``prompt_cache_retention`` (prefix caching is automatic),
  ``service_tier`` (the response says ``default``), ``text.verbosity``,
  ``reasoning.context`` / ``mode``, ``context_management`` (mlxd never
  compacts), ``client_metadata`` (Codex's; not in OpenAI's spec, accepted
  because Codex always sends it), ``access_programs``, ``image``, the other
  ``include`` values (nothing of theirs is ever produced),
  ``stream_options.include_obfuscation``, ``cache_control`` /
  ``prompt_cache_breakpoint`` on text parts.
- Log-probabilities: ``include`` of ``message.output_text.logprobs`` puts
  them on the output text, with ``top_logprobs`` (0..20) alternatives per
  token.
- ``max_tool_calls`` (>= 1) caps the function calls of one response: a
  forced choice ends the turn after that many (without it, the model's
  ``max_tool_calls_per_turn``), and under ``auto`` later calls are dropped.
- Refused (400 naming the field): ``truncation: "auto"`` (mlxd never drops
  input to fit), ``moderation``, and every field in no official spec.

:func:`to_generate_request` turns a decoded request into the worker's
:class:`~shared.protocol.GenerateRequest` (one choice);
:func:`response_settings` gives the settings the response echoes,
:func:`output_options` how it renders its items and
:func:`dropped_tools` which tools were dropped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Union

import msgspec
from msgspec import UNSET, Meta, Raw, UnsetType

from gateway.custom_tools import custom_arguments
from gateway.encrypted_reasoning import SealError, unseal
from gateway.errors import APIError, bad_request
from gateway.openai_checks import THINKING_BY_EFFORT as _CHAT_THINKING_BY_EFFORT
from gateway.openai_checks import check_cache_control, check_service_fields
from gateway.openai_schema import CacheControl, PromptCacheOptions
from gateway.openai_tool_checks import check_tool_choice
from gateway.responses_format import (
    OutputOptions,
    ReasoningEcho,
    ResponseSettings,
    TextEcho,
    TextFormatEcho,
)
from gateway.responses_tools import ToolCatalog, ToolParam, catalog
from gateway.validation import (
    MAX_CONTENT_PARTS,
    MAX_METADATA_VALUE_CHARS,
    MAX_TEXT_CHARS,
    MAX_TOOLS,
    MAX_TOP_LOGPROBS,
    Identifier,
    JSONObject,
    MaxTokens,
    Metadata,
    ModelName,
    SchemaName,
    ShortText,
    Temperature,
    Text,
    TopP,
    check_finite,
    decode_body,
    not_supported,
    one_of,
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
MAX_TOOL_CALLS = 2**31 - 1
"""Type bound of ``max_tool_calls``."""
MAX_INCLUDE = 64
"""Most ``include`` (and ``context_management``) entries."""
MAX_CLIENT_METADATA = 64
"""Most ``client_metadata`` pairs."""

# --- field types (the rest from gateway.validation) -------------------

ClientMetadata = Annotated[
    dict[Annotated[str, Meta(max_length=MAX_METADATA_VALUE_CHARS)], Annotated[str, Meta(max_length=MAX_TEXT_CHARS)]],
    Meta(max_length=MAX_CLIENT_METADATA),
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
    cache_control: CacheControl | None | UnsetType = UNSET
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
    input: Text | UnsetType = UNSET
    namespace: ShortText | None | UnsetType = UNSET
    caller: Raw | UnsetType = UNSET
    tools: Annotated[list[ToolParam], Meta(max_length=MAX_TOOLS)] | UnsetType = UNSET


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
    """``text``: the output ``format``; ``verbosity`` (``low``, ``medium``,
    ``high``) is echoed and has no effect."""

    format: TextFormatParam | None = None
    verbosity: ShortText | None = None


class ReasoningParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``reasoning``: ``effort`` picks thinking on/off; ``summary`` (or the
    deprecated ``generate_summary``) puts the reasoning text in the
    reasoning item's summary; ``context`` and ``mode`` are echoed."""

    effort: ShortText | None = None
    summary: ShortText | None = None
    generate_summary: ShortText | None = None
    context: ShortText | None = None
    mode: ShortText | None = None


class ContextManagementParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One ``context_management`` entry: accepted, no effect (mlxd never
    compacts; an input too long for the context is a 400)."""

    type: ShortText
    compact_threshold: Annotated[int, Meta(ge=0)] | None = None


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
    prompt_cache_options: PromptCacheOptions | None = None
    prompt_cache_retention: ShortText | None = None
    context_management: Annotated[list[ContextManagementParam], Meta(max_length=MAX_INCLUDE)] | None = None
    client_metadata: ClientMetadata | None = None
    moderation: Raw | None = None
    background_options: Raw | None = None
    access_programs: Raw | None = None
    image: Raw | None = None


_decoder = msgspec.json.Decoder(ResponsesRequest)


def decode_responses_request(body: bytes) -> ResponsesRequest:
    """Decode and fully validate a ``POST /v1/responses`` body.

    Raises:
        APIError: 400 with ``param`` naming the first offending field.
    """
    try:
        req: ResponsesRequest = decode_body(_decoder, body)
    except APIError as exc:
        _refuse_item_by_type(body, exc)
        raise
    _check_settings(req)
    _check_input(req.input)
    _check_tools(req)
    _check_text(req.text)
    return req


# --- checks -----------------------------------------------------------------------------


def _given(value: object) -> bool:
    """Whether an optional field was sent with a value (null counts as not)."""
    if value is UNSET or value is None:
        return False
    return not (isinstance(value, Raw) and bytes(value) == b"null")


def _stateless(name: str) -> APIError:
    """The 400 for a field that needs stored state (``name``)."""
    return bad_request(f"stateless server: {name} is not supported; send the full input", name)


def _check_settings(req: ResponsesRequest) -> None:
    """Check the sampling numbers, refuse what needs stored state or a
    service mlxd lacks, and check the enumerated settings.

    Raises:
        APIError: 400 naming the field.
    """
    check_finite(req, ("temperature", "top_p"))
    if req.previous_response_id is not None:
        raise _stateless("previous_response_id")
    if _given(req.conversation):
        raise _stateless("conversation")
    if req.background:
        raise not_supported("background", "background mode (mlxd is stateless)")
    if _given(req.background_options):
        raise not_supported("background_options", "'background_options' (there is no background mode)")
    if _given(req.prompt):
        raise not_supported("prompt", "'prompt' (stored prompt templates)")
    if _given(req.moderation):
        raise not_supported("moderation", "'moderation' (mlxd runs no moderation model)")
    if req.stream_options is not None and req.stream is not True:
        raise bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options")
    _check_enums(req)
    _check_neutral(req)
    _check_reasoning(req.reasoning)


INCLUDABLE = (
    "reasoning.encrypted_content",
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "message.output_text.logprobs",
)
"""The official ``include`` values; see :func:`_check_neutral` for which
have an effect."""


def _check_enums(req: ResponsesRequest) -> None:
    """Every enumerated setting holds one of its official values.

    Raises:
        APIError: 400 naming the field.
    """
    verbosity = req.text.verbosity if req.text is not None else None
    check_service_fields(
        req.service_tier, req.prompt_cache_options, req.prompt_cache_retention, verbosity, "text.verbosity"
    )
    one_of(req.truncation, ("auto", "disabled"), "truncation")
    for index, value in enumerate(req.include or ()):
        one_of(value, INCLUDABLE, f"include[{index}]")


def _check_neutral(req: ResponsesRequest) -> None:
    """Fields accepted only where mlxd can keep their promise.

    Raises:
        APIError: 400 naming the field: ``truncation: "auto"`` (mlxd does
        not drop input to fit; a too-long input is a 400).
    """
    if req.truncation == "auto":
        raise not_supported(
            "truncation", "truncation 'auto' (mlxd never drops input to fit; a too-long input is a 400)"
        )


THINKING_BY_EFFORT = _CHAT_THINKING_BY_EFFORT
"""``reasoning.effort`` -> whether the model's reasoning mode is on (the
same values as chat's ``reasoning_effort``)."""

SUMMARIES = ("auto", "concise", "detailed")
"""Accepted ``reasoning.summary`` values: each puts the model's whole
reasoning text in the reasoning item's summary."""


def _check_reasoning(reasoning: ReasoningParam | None) -> None:
    """``reasoning``: a known ``effort``, ``summary`` / ``generate_summary``
    (which must agree), ``context`` and ``mode``.

    Raises:
        APIError: 400 naming the ``reasoning`` field.
    """
    if reasoning is None:
        return
    one_of(reasoning.effort, tuple(THINKING_BY_EFFORT), "reasoning.effort")
    one_of(reasoning.summary, SUMMARIES, "reasoning.summary")
    one_of(reasoning.generate_summary, SUMMARIES, "reasoning.generate_summary")
    one_of(reasoning.context, ("auto", "current_turn", "all_turns"), "reasoning.context")
    both = reasoning.summary is not None and reasoning.generate_summary is not None
    if both and reasoning.summary != reasoning.generate_summary:
        raise bad_request(
            "'reasoning.summary' and 'reasoning.generate_summary' disagree; send only 'summary'",
            "reasoning.generate_summary",
        )


def tool_catalog(req: ResponsesRequest) -> ToolCatalog:
    """The request's tools (top-level and from ``additional_tools`` input
    items) as the model sees them (see :mod:`gateway.responses_tools`);
    call only on a request whose input items were checked."""
    extra = []
    if not isinstance(req.input, str):
        extra = [
            (f"input[{index}].tools", item.tools)
            for index, item in enumerate(req.input)
            if _item_type(item) == "additional_tools" and isinstance(item.tools, list)
        ]
    return catalog(req.tools, extra)


def _check_tools(req: ResponsesRequest) -> None:
    """The tools (see :func:`gateway.responses_tools.catalog`) and a valid
    ``tool_choice``.

    Raises:
        APIError: 400 naming the offending tool field or the offending part
        of ``tool_choice``.
    """
    tools = tool_catalog(req)
    choice = req.tool_choice
    if isinstance(choice, ToolChoiceParam) and choice.type == "allowed_tools":
        _allowed_names(choice, tools)
        return
    if not tools.refs and choice == "auto":
        return  # no tools (an empty list, as Codex's title request sends, or all dropped): no call
    if not tools.refs and tools.dropped and choice not in (None, "none"):
        raise bad_request(
            f"'tool_choice' forces a tool call, but mlxd cannot run any of the tools ({', '.join(tools.dropped)})",
            "tool_choice",
        )
    check_tool_choice(choice, set(tools.refs), lambda c: _chosen_tool(c, tools), "tool_choice.name")


def _chosen_tool(choice: ToolChoiceParam, tools: ToolCatalog) -> str:
    """The model-facing name of the tool an object ``tool_choice`` forces:
    ``{"type": "function"|"custom", "name"}``, ``name`` the tool's own name
    or its model-facing (namespace-qualified) one.

    Raises:
        APIError: 400 param ``tool_choice.type`` (a tool type mlxd cannot
        run, or an unknown one) or ``tool_choice`` (no name, or fields of
        the other forms).
    """
    if choice.type not in ("function", "custom"):
        raise bad_request(
            f"tool_choice type '{choice.type}' forces a tool mlxd cannot run; only 'function', 'custom' "
            "and 'allowed_tools' are supported",
            "tool_choice.type",
        )
    if choice.name is UNSET or any(_given(getattr(choice, f)) for f in ("mode", "tools", "server_label")):
        raise bad_request(f'A {choice.type} tool_choice is {{"type": "{choice.type}", "name": ...}}', "tool_choice")
    return _resolve_name(choice.name, choice.type, tools)  # type: ignore[arg-type]


def _resolve_name(name: str, kind: str, tools: ToolCatalog) -> str:
    """The model-facing name for ``name`` (model-facing already, or the own
    name of exactly one tool); ``name`` itself when there is none (the
    caller reports it)."""
    ref = tools.refs.get(name)
    if ref is not None:
        if ref.kind != kind:
            raise bad_request(f"tool_choice names '{name}', which is a {ref.kind} tool", "tool_choice.type")
        return name
    matches = [model for model, ref in tools.refs.items() if ref.name == name and ref.kind == kind]
    return matches[0] if len(matches) == 1 else name


class AllowedToolParam(msgspec.Struct, forbid_unknown_fields=False, kw_only=True):
    """One entry of an ``allowed_tools`` choice: a tool's ``type`` and,
    for function and custom tools, its ``name``. Other fields are allowed:
    an entry for a hosted tool repeats that tool's own fields."""

    type: ShortText
    name: ShortText | None = None


_allowed_decoder = msgspec.json.Decoder(list[AllowedToolParam])


def _allowed_names(choice: ToolChoiceParam, tools: ToolCatalog) -> set[str]:
    """The model-facing names an ``allowed_tools`` choice keeps (entries
    for dropped tool types keep nothing).

    Raises:
        APIError: 400 param ``tool_choice.mode`` (not ``auto`` or
        ``required``), ``tool_choice.tools`` (missing or malformed) or
        ``tool_choice.tools[i].name`` (not among the tools).
    """
    if choice.mode is UNSET or bytes(choice.mode) not in (b'"auto"', b'"required"'):  # type: ignore[arg-type]
        raise bad_request("An allowed_tools tool_choice needs 'mode': 'auto' or 'required'", "tool_choice.mode")
    if choice.tools is UNSET:
        raise bad_request("Missing required parameter: 'tool_choice.tools'", "tool_choice.tools")
    try:
        entries = _allowed_decoder.decode(bytes(choice.tools))  # type: ignore[arg-type]
    except msgspec.ValidationError as exc:
        raise bad_request(f"Invalid value for 'tool_choice.tools': {exc}", "tool_choice.tools") from None
    names: set[str] = set()
    for index, entry in enumerate(entries):
        if entry.type not in ("function", "custom"):
            continue
        name = _resolve_name(entry.name or "", entry.type, tools)
        if name not in tools.refs:
            raise bad_request(
                f"allowed_tools names '{entry.name}', which is not among 'tools'", f"tool_choice.tools[{index}].name"
            )
        names.add(name)
    return names


_FORMATS = ("text", "json_object", "json_schema")


def _check_text(text: TextParam | None) -> None:
    """``text.format`` of a known type with the fields it needs.

    Raises:
        APIError: 400 naming the ``text`` field.
    """
    if text is None:
        return
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
    "input_text": ("text", "prompt_cache_breakpoint", "cache_control"),
    "output_text": ("text", "annotations", "logprobs"),
    "refusal": ("refusal",),
    "reasoning_text": ("text",),
    "summary_text": ("text",),
    "input_image": ("detail", "image_url", "file_id"),
    "input_file": ("file_data", "file_id", "file_url", "filename", "detail"),
}
"""Supported part types and the fields each may carry (the first is
required, but for ``input_file``, and holds a text part's text; ``prompt_cache_breakpoint`` and
``cache_control`` are accepted and have no effect: prefix caching is
automatic)."""

_MEDIA_PARTS = ("input_image", "input_file", "input_audio")
"""Part types refused as not supported (rather than as invalid)."""

_USER_PARTS = ("input_text",)
_TOOL_OUTPUT_PARTS = ("input_text", "input_image", "input_file")
_ASSISTANT_PARTS = ("output_text", "refusal", "input_text")

_ITEM_FIELDS = {
    "message": ("type", "role", "content", "id", "status", "phase"),
    "function_call": ("type", "call_id", "name", "arguments", "id", "status", "namespace", "caller"),
    "function_call_output": ("type", "call_id", "output", "id", "status", "name", "namespace", "caller"),
    "custom_tool_call": ("type", "call_id", "name", "input", "id", "status", "namespace", "caller"),
    "custom_tool_call_output": ("type", "call_id", "output", "id", "status", "caller"),
    "reasoning": ("type", "id", "summary", "content", "encrypted_content", "status"),
    "additional_tools": ("type", "role", "tools", "id"),
}
"""Supported item types and the fields each may carry (``caller`` is
accepted and has no effect: every call is direct)."""

_REQUIRED_FIELDS = {
    "message": ("role", "content"),
    "function_call": ("call_id", "name", "arguments"),
    "function_call_output": ("call_id", "output"),
    "custom_tool_call": ("call_id", "name", "input"),
    "custom_tool_call_output": ("call_id", "output"),
    "reasoning": (),
    "additional_tools": ("role", "tools"),
}

_HOSTED_CALL = "it belongs to a hosted tool, and mlxd runs none (they are dropped from 'tools')"
_BUILTIN_CALL = "it belongs to the {} tool, which mlxd drops from 'tools' (its model never makes such calls)"
_MCP_ITEM = "MCP items are read only when 'tools' has an 'mcp' tool naming a configured MCP server"

_REFUSED_ITEMS = {
    "item_reference": "mlxd is stateless; send the item itself",
    "file_search_call": _HOSTED_CALL,
    "web_search_call": _HOSTED_CALL,
    "computer_call": _HOSTED_CALL,
    "computer_call_output": _HOSTED_CALL,
    "code_interpreter_call": _HOSTED_CALL,
    "image_generation_call": _HOSTED_CALL,
    "tool_search_call": _HOSTED_CALL,
    "tool_search_output": _HOSTED_CALL,
    "local_shell_call": _BUILTIN_CALL.format("'local_shell'"),
    "local_shell_call_output": _BUILTIN_CALL.format("'local_shell'"),
    "shell_call": _BUILTIN_CALL.format("'shell'"),
    "shell_call_output": _BUILTIN_CALL.format("'shell'"),
    "apply_patch_call": _BUILTIN_CALL.format("'apply_patch'"),
    "apply_patch_call_output": _BUILTIN_CALL.format("'apply_patch'"),
    "program": _BUILTIN_CALL.format("'programmatic_tool_calling'"),
    "program_output": _BUILTIN_CALL.format("'programmatic_tool_calling'"),
    "compaction": "its encrypted_content is OpenAI's compacted context, which mlxd cannot read; send the items it replaced",
    "compaction_trigger": "mlxd never compacts the input",
    "configuration_update": "not implemented; set 'reasoning' and 'text' on the request instead",
    "mcp_list_tools": _MCP_ITEM,
    "mcp_call": _MCP_ITEM,
    "mcp_approval_request": _MCP_ITEM,
    "mcp_approval_response": _MCP_ITEM,
}
"""The official input item types mlxd refuses, with the reason the 400 gives."""


def _unsupported_item(kind: str, param: str) -> APIError:
    """The 400 refusing an input item of type ``kind``, with its reason."""
    reason = _REFUSED_ITEMS.get(kind)
    if reason is None:
        return not_supported(param, f"input item type '{kind}'")
    return bad_request(f"input item type '{kind}' is not supported: {reason}", param)


def _refuse_item_by_type(body: bytes, exc: APIError) -> None:
    """When decoding failed inside an input item whose type mlxd does not
    take (its fields are then unknown to :class:`InputItemParam`), raise the
    400 that refuses the item by type instead of naming one of its fields.

    Only runs on the error path. Raises:
        APIError: 400 naming ``input[i].type``.
    """
    match = re.match(r"input\[(\d+)\]", exc.param or "")
    if match is None:
        return
    try:
        item = json.loads(body)["input"][int(match.group(1))]
    except (ValueError, LookupError, TypeError):
        return
    kind = item.get("type", "message") if isinstance(item, dict) else None
    if isinstance(kind, str) and kind not in _ITEM_FIELDS:
        raise _unsupported_item(kind, f"{match.group(0)}.type") from None


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
    if kind not in _ITEM_FIELDS:
        raise _unsupported_item(kind, f"{path}.type")
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
    """A tool call's output is text or parts: ``input_text``, and
    ``input_image`` / ``input_file`` (which the model sees as a
    placeholder, :data:`MEDIA_PLACEHOLDER`)."""
    _check_parts(item.output, _TOOL_OUTPUT_PARTS, f"{path}.output")  # type: ignore[arg-type]


def _check_reasoning_item(item: InputItemParam, path: str) -> None:
    """Reasoning in the history: ``reasoning_text`` content, ``summary_text``
    summary, and an ``encrypted_content`` that is mlxd's own
    (:mod:`gateway.encrypted_reasoning`) or foreign (then unused)."""
    if _given(item.encrypted_content):
        try:
            unseal(item.encrypted_content)  # type: ignore[arg-type]
        except SealError as exc:
            raise bad_request(str(exc), f"{path}.encrypted_content") from None
    if isinstance(item.content, str):
        raise bad_request("A reasoning item's 'content' must be a list of reasoning_text parts", f"{path}.content")
    for name, kind in (("content", "reasoning_text"), ("summary", "summary_text")):
        parts = getattr(item, name)
        _check_parts(parts if _given(parts) else [], (kind,), f"{path}.{name}")


def _check_additional_tools(item: InputItemParam, path: str) -> None:
    """Only the ``developer`` role adds tools."""
    if item.role != "developer":
        raise bad_request("An 'additional_tools' item's role must be 'developer'", f"{path}.role")


_ITEM_CHECKS = {
    "additional_tools": _check_additional_tools,
    "message": _check_message,
    "function_call_output": _check_function_output,
    "custom_tool_call_output": _check_function_output,
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
        if part.type in _MEDIA_PARTS and part.type not in allowed:
            raise not_supported(f"{where}.type", f"content part type '{part.type}' (mlxd is text-only)")
        if part.type not in allowed:
            raise bad_request(
                f"Invalid content part type '{part.type}' here; expected {', '.join(allowed)}", f"{where}.type"
            )
        fields = _PART_FIELDS[part.type]
        for name in part.__struct_fields__:
            if name != "type" and name not in fields and _given(getattr(part, name)):
                raise bad_request(f"Unrecognized field '{name}' in a '{part.type}' part", f"{where}.{name}")
        if part.type != "input_file" and getattr(part, fields[0]) is UNSET:
            raise bad_request(f"Missing required parameter: '{where}.{fields[0]}'", f"{where}.{fields[0]}")
        if isinstance(part.cache_control, CacheControl):
            check_cache_control(part.cache_control, where)


# --- translation ---------------------------------------------------------------------------


MEDIA_PLACEHOLDER = "[{kind} not shown: this model reads text only]"
"""What the model sees instead of an image or file in a tool's output
(``{kind}`` is ``image`` or ``file``)."""


def _part_text(part: ContentPartParam) -> str:
    """The text a part carries (its ``text``, a refusal's ``refusal``, or
    the placeholder of an image or file)."""
    if part.type in ("input_image", "input_file"):
        return MEDIA_PLACEHOLDER.format(kind=part.type.removeprefix("input_"))
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
    """A reasoning item's text: what its mlxd ``encrypted_content`` seals,
    else its content, else its summary."""
    if _given(item.encrypted_content):
        sealed = unseal(item.encrypted_content)  # type: ignore[arg-type]
        if sealed is not None:
            return sealed
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
    ``tool`` message; its ``name`` defaults to the earlier call's. Calls
    carry their model-facing names (``tools`` maps namespaced ones); a
    custom tool call's ``input`` becomes the arguments ``{"input": ...}``
    and its output a ``tool`` message like a function's.
    """

    def __init__(self, tools: ToolCatalog) -> None:
        self.messages: list[ChatMessage] = []
        self._tools = tools
        self._turn: _AssistantTurn | None = None
        self._call_names: dict[str, str] = {}

    def add(self, item: InputItemParam) -> None:
        """Take the next input item."""
        kind = _item_type(item)
        if kind == "additional_tools":
            return  # its tools joined the request's tools
        if kind == "reasoning":
            self._reasoning(item)
        elif kind in ("function_call", "custom_tool_call"):
            self._function_call(item)
        elif kind in ("function_call_output", "custom_tool_call_output"):
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
        """A function or custom tool call joins the current assistant turn."""
        if _item_type(item) == "custom_tool_call":
            arguments = custom_arguments(item.input)  # type: ignore[arg-type]
        else:
            arguments = item.arguments if isinstance(item.arguments, str) else ""
        namespace = item.namespace if isinstance(item.namespace, str) else None
        name = self._tools.model_name(item.name or "", namespace)  # type: ignore[arg-type]
        call = ToolCall(id=item.call_id or "", name=name, arguments=arguments)
        self._call_names[call.id] = call.name
        self._current_turn(new_if_started=False).calls.append(call)

    def _tool_output(self, item: InputItemParam) -> None:
        """A function call output becomes a ``tool`` message (ending any
        assistant turn)."""
        self._flush()
        call_id = item.call_id or ""
        namespace = item.namespace if isinstance(item.namespace, str) else None
        name = item.name if isinstance(item.name, str) else None
        if name is not None:
            name = self._tools.model_name(name, namespace)
        name = name or self._call_names.get(call_id)
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
        history = _History(tool_catalog(req))
        for item in req.input:
            history.add(item)
        messages = history.finish()
    if req.instructions is None:
        return messages
    if messages and messages[0].role == "system":
        merged = f"{req.instructions}\n\n{messages[0].content}"
        return [ChatMessage(role="system", content=merged), *messages[1:]]
    return [ChatMessage(role="system", content=req.instructions), *messages]


def _tools(req: ResponsesRequest, tools: ToolCatalog) -> list[Tool] | None:
    """The tools for the worker (None when there are none): all of them,
    or those an ``allowed_tools`` choice keeps."""
    choice = req.tool_choice
    if isinstance(choice, ToolChoiceParam) and choice.type == "allowed_tools":
        return tools.restricted(_allowed_names(choice, tools)) or None
    return tools.tools or None


def _tool_choice(req: ResponsesRequest, tools: ToolCatalog) -> tuple[ToolChoice, str | None]:
    """``(tool_choice, tool_choice_name)`` for the worker (the name is the
    forced tool's model-facing name)."""
    choice = req.tool_choice
    if isinstance(choice, ToolChoiceParam):
        if choice.type == "allowed_tools":
            mode = msgspec.json.decode(bytes(choice.mode))  # type: ignore[arg-type]
            return (mode if tools.restricted(_allowed_names(choice, tools)) else "none"), None
        return "function", _resolve_name(choice.name, choice.type, tools)  # type: ignore[arg-type]
    if choice is None or (choice != "none" and not tools.tools):
        return ("auto" if tools.tools else "none"), None
    return choice, None  # type: ignore[return-value]


def _response_format(req: ResponsesRequest) -> ResponseFormat | None:
    """``text.format`` for the worker (None for plain text)."""
    fmt = req.text.format if req.text is not None else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return ResponseFormat(type="json_object")
    return ResponseFormat(type="json_schema", schema=fmt.schema, strict=bool(fmt.strict))  # type: ignore[arg-type]


def _logprobs(req: ResponsesRequest) -> bool:
    """Whether output text carries log-probabilities: ``include`` asks for
    ``message.output_text.logprobs`` (``top_logprobs`` only says how many
    alternatives each token then lists, as on OpenAI)."""
    return "message.output_text.logprobs" in (req.include or ())


def _thinking(req: ResponsesRequest) -> bool | None:
    """Whether to turn the reasoning mode on (None: the template default)."""
    effort = req.reasoning.effort if req.reasoning is not None else None
    return None if effort is None else THINKING_BY_EFFORT[effort]


def to_generate_request(req: ResponsesRequest, request_id: str) -> GenerateRequest:
    """Translate a validated request into the worker's ``GenerateRequest``
    (one choice; ``max_tokens`` None when ``max_output_tokens`` is unset;
    ``timeout`` left for the engine)."""
    tools = tool_catalog(req)
    choice, choice_name = _tool_choice(req, tools)
    return GenerateRequest(
        request_id=request_id,
        sampling=SamplingParams(
            max_tokens=req.max_output_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            logprobs=_logprobs(req),
            top_logprobs=(req.top_logprobs or 0) if _logprobs(req) else 0,
        ),
        messages=_messages(req),
        n=1,
        tools=_tools(req, tools),
        tool_choice=choice,
        tool_choice_name=choice_name,
        parallel_tool_calls=req.parallel_tool_calls is not False,
        response_format=_response_format(req),
        thinking=_thinking(req),
        max_tool_calls=req.max_tool_calls,
    )


# --- echo -----------------------------------------------------------------------------------


def _text_echo(req: ResponsesRequest) -> TextEcho:
    """The response's ``text`` (``verbosity`` ``medium`` when unset)."""
    fmt = req.text.format if req.text is not None else None
    verbosity = (req.text.verbosity if req.text is not None else None) or "medium"
    if fmt is None:
        return TextEcho(format=TextFormatEcho(type="text"), verbosity=verbosity)
    return TextEcho(
        format=TextFormatEcho(
            type=fmt.type,
            name=None if fmt.name is UNSET else fmt.name,
            schema=None if fmt.schema is UNSET else fmt.schema,
            description=None if fmt.description is UNSET else fmt.description,
            strict=None if fmt.strict is UNSET else fmt.strict,
        ),
        verbosity=verbosity,
    )


def _summary(req: ResponsesRequest) -> str | None:
    """The requested reasoning summary (``summary`` or its deprecated
    alias ``generate_summary``), or None."""
    if req.reasoning is None:
        return None
    return req.reasoning.summary or req.reasoning.generate_summary


def _choice_echo(req: ResponsesRequest, tools: ToolCatalog) -> str | dict[str, Any]:
    """The response's ``tool_choice``: the request's object choice as sent,
    else the string choice in effect."""
    choice = req.tool_choice
    if isinstance(choice, ToolChoiceParam):
        if choice.type == "allowed_tools":
            return {
                "type": "allowed_tools",
                "mode": msgspec.json.decode(bytes(choice.mode)),  # type: ignore[arg-type]
                "tools": msgspec.json.decode(bytes(choice.tools)),  # type: ignore[arg-type]
            }
        return {"type": choice.type, "name": choice.name}
    return _tool_choice(req, tools)[0]


def output_options(req: ResponsesRequest) -> OutputOptions:
    """How the response renders its output items for ``req``: tool calls
    mapped back to custom and namespaced tools, reasoning as a summary when
    one was asked for, and sealed reasoning when ``include`` asks for
    ``reasoning.encrypted_content``."""
    return OutputOptions(
        tools=tool_catalog(req).refs,
        summary=_summary(req) is not None,
        encrypted_reasoning="reasoning.encrypted_content" in (req.include or ()),
        logprobs=_logprobs(req),
    )


def dropped_tools(req: ResponsesRequest) -> list[str]:
    """The types of the request's tools that were dropped."""
    return tool_catalog(req).dropped


def response_settings(req: ResponsesRequest, sampling_defaults: dict[str, float] | None = None) -> ResponseSettings:
    """The settings the response object echoes for ``req`` (defaults where
    the request left them unset; ``temperature`` and ``top_p`` from the
    model's ``sampling_defaults`` when known, else 1)."""
    defaults = sampling_defaults or {}
    tools = tool_catalog(req)
    reasoning = req.reasoning
    return ResponseSettings(
        instructions=req.instructions,
        max_output_tokens=req.max_output_tokens,
        max_tool_calls=req.max_tool_calls,
        metadata=dict(req.metadata or {}),
        parallel_tool_calls=req.parallel_tool_calls is not False,
        reasoning=ReasoningEcho(
            effort=reasoning.effort if reasoning is not None else None,
            summary=_summary(req),
        ),
        temperature=defaults.get("temperature", 1.0) if req.temperature is None else req.temperature,
        text=_text_echo(req),
        tool_choice=_choice_echo(req, tools),
        tools=tools.echo,
        top_p=defaults.get("top_p", 1.0) if req.top_p is None else req.top_p,
        user=req.user,
        safety_identifier=req.safety_identifier,
        prompt_cache_key=req.prompt_cache_key,
        prompt_cache_retention=req.prompt_cache_retention,
        truncation=req.truncation or "disabled",
        top_logprobs=req.top_logprobs or 0,
    )
