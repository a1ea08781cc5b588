"""Decoding and checking of ``POST /v1/responses`` bodies
(:mod:`gateway.responses.schema` has their shapes and, in its docstring,
the rules).

:func:`decode_responses_request` decodes strictly
(:func:`gateway.frontend.validation.decode_body`) and then checks what the types
cannot express: the stateless refusals, enumerated values, reasoning,
``tools`` and ``tool_choice`` (:func:`tool_catalog`), ``text.format`` and
every ``input`` item and content part
(:mod:`gateway.responses.input_checks`). Every refusal is an
:class:`~gateway.core.errors.APIError` 400 naming the field. Pure functions,
called on the event loop.
"""

from __future__ import annotations

import msgspec
from msgspec import UNSET

from gateway.core.errors import APIError, bad_request
from gateway.frontend.validation import ShortText, check_finite, decode_body, is_given, not_supported, one_of
from gateway.openai.checks import THINKING_BY_EFFORT as _CHAT_THINKING_BY_EFFORT
from gateway.openai.checks import check_service_fields
from gateway.openai.tool_checks import check_tool_choice
from gateway.responses.input_checks import check_input, item_type, refuse_item_by_type
from gateway.responses.schema import (
    ReasoningParam,
    ResponsesRequest,
    TextParam,
    ToolChoiceParam,
)
from gateway.responses.tools import ToolCatalog, catalog

_decoder = msgspec.json.Decoder(ResponsesRequest)


def decode_responses_request(body: bytes) -> ResponsesRequest:
    """Decode and fully validate a ``POST /v1/responses`` body.

    Raises:
        APIError: 400 with ``param`` naming the first offending field.
    """
    try:
        req: ResponsesRequest = decode_body(_decoder, body)
    except APIError as exc:
        refuse_item_by_type(body, exc)
        raise
    _check_settings(req)
    check_input(req.input)
    _check_tools(req)
    _check_text(req.text)
    return req


# --- checks -----------------------------------------------------------------------------


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
    items) as the model sees them (see :mod:`gateway.responses.tools`);
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
    """The tools (see :func:`gateway.responses.tools.catalog`) and a valid
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
