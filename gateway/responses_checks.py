"""Decoding and checking of ``POST /v1/responses`` bodies
(:mod:`gateway.responses_schema` has their shapes and, in its docstring,
the rules).

:func:`decode_responses_request` decodes strictly
(:func:`gateway.validation.decode_body`) and then checks what the types
cannot express: the stateless refusals, enumerated values, reasoning,
``tools`` and ``tool_choice`` (:func:`tool_catalog`), ``text.format`` and
every ``input`` item and content part (official item types mlxd cannot
read are refused by type, with a reason). Every refusal is an
:class:`~gateway.errors.APIError` 400 naming the field. Pure functions,
called on the event loop.
"""

from __future__ import annotations

import json
import re

import msgspec
from msgspec import UNSET, Raw

from gateway.encrypted_reasoning import SealError, unseal
from gateway.errors import APIError, bad_request
from gateway.openai_checks import THINKING_BY_EFFORT as _CHAT_THINKING_BY_EFFORT
from gateway.openai_checks import check_cache_control, check_service_fields
from gateway.openai_schema import CacheControl
from gateway.openai_tool_checks import check_tool_choice
from gateway.responses_schema import (
    ContentPartParam,
    InputItemParam,
    ReasoningParam,
    ResponsesRequest,
    TextParam,
    ToolChoiceParam,
)
from gateway.responses_tools import ToolCatalog, catalog
from gateway.validation import ShortText, check_finite, decode_body, is_null, not_supported, one_of

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


def is_given(value: object) -> bool:
    """Whether an optional field was sent with a value (null counts as not)."""
    if value is UNSET or value is None:
        return False
    return not (isinstance(value, Raw) and is_null(value))


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
    if is_given(req.conversation):
        raise _stateless("conversation")
    if req.background:
        raise not_supported("background", "background mode (mlxd is stateless)")
    if is_given(req.background_options):
        raise not_supported("background_options", "'background_options' (there is no background mode)")
    if is_given(req.prompt):
        raise not_supported("prompt", "'prompt' (stored prompt templates)")
    if is_given(req.moderation):
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
            if item_type(item) == "additional_tools" and isinstance(item.tools, list)
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
        allowed_tool_names(choice, tools)
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
    if choice.name is UNSET or any(is_given(getattr(choice, f)) for f in ("mode", "tools", "server_label")):
        raise bad_request(f'A {choice.type} tool_choice is {{"type": "{choice.type}", "name": ...}}', "tool_choice")
    return resolve_tool_name(choice.name, choice.type, tools)  # type: ignore[arg-type]


def resolve_tool_name(name: str, kind: str, tools: ToolCatalog) -> str:
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


def allowed_tool_names(choice: ToolChoiceParam, tools: ToolCatalog) -> set[str]:
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
        name = resolve_tool_name(entry.name or "", entry.type, tools)
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
    extra = [name for name in ("name", "schema", "description", "strict") if is_given(getattr(fmt, name))]
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


ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
"""Accepted message roles, each with the worker role it becomes."""


def item_type(item: InputItemParam) -> str:
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
    kind = item_type(item)
    if kind not in _ITEM_FIELDS:
        raise _unsupported_item(kind, f"{path}.type")
    allowed = _ITEM_FIELDS[kind]
    for name in item.__struct_fields__:
        if name not in allowed and is_given(getattr(item, name)):
            raise bad_request(f"Unrecognized field '{name}' in a '{kind}' item", f"{path}.{name}")
    for name in _REQUIRED_FIELDS[kind]:
        if not is_given(getattr(item, name)):
            raise bad_request(f"Missing required parameter: '{path}.{name}'", f"{path}.{name}")
    check = _ITEM_CHECKS.get(kind)
    if check is not None:
        check(item, path)


def _check_message(item: InputItemParam, path: str) -> None:
    """A message's role and content parts."""
    if item.role not in ROLES:
        raise bad_request(f"Invalid role '{item.role}'; expected one of {', '.join(ROLES)}", f"{path}.role")
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
    if is_given(item.encrypted_content):
        try:
            unseal(item.encrypted_content)  # type: ignore[arg-type]
        except SealError as exc:
            raise bad_request(str(exc), f"{path}.encrypted_content") from None
    if isinstance(item.content, str):
        raise bad_request("A reasoning item's 'content' must be a list of reasoning_text parts", f"{path}.content")
    for name, kind in (("content", "reasoning_text"), ("summary", "summary_text")):
        parts = getattr(item, name)
        _check_parts(parts if is_given(parts) else [], (kind,), f"{path}.{name}")


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
            if name != "type" and name not in fields and is_given(getattr(part, name)):
                raise bad_request(f"Unrecognized field '{name}' in a '{part.type}' part", f"{where}.{name}")
        if part.type != "input_file" and getattr(part, fields[0]) is UNSET:
            raise bad_request(f"Missing required parameter: '{where}.{fields[0]}'", f"{where}.{fields[0]}")
        if isinstance(part.cache_control, CacheControl):
            check_cache_control(part.cache_control, where)
