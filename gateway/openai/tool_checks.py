"""Checks of chat ``tools``, ``tool_choice`` and the legacy ``functions`` /
``function_call`` (rules in :mod:`gateway.openai.schema`'s docstring);
:func:`check_tool_choice` is shared with the Responses body. Every refusal
is an :class:`~gateway.core.errors.APIError` 400 naming the field.
"""

from __future__ import annotations

from typing import Any, Callable, Collection, Mapping, TypeVar

from gateway.core.errors import bad_request
from gateway.frontend.validation import not_supported, one_of
from gateway.openai.schema import ChatCompletionRequest, ChosenFunction, CustomToolParam, ToolChoiceParam

_Choice = TypeVar("_Choice")


def check_tools(req: ChatCompletionRequest) -> None:
    """Check ``tools`` and ``tool_choice``, or the legacy ``functions`` and
    ``function_call`` (:func:`_check_functions`).

    Raises:
        APIError: 400 naming ``tools[i].type`` (``custom``, or another
        type), ``tools[i].function``, ``tools[i].function.name``
        (duplicate), the offending part of ``tool_choice``, or the legacy
        field at fault.
    """
    if legacy_functions(req):
        _check_functions(req)
        return
    kinds: dict[str, str] = {}
    for index, tool in enumerate(req.tools or ()):
        path = f"tools[{index}]"
        kind, name = tool_ref(tool.type, tool.function, tool.custom, path, "tool")
        if kind == "custom":
            _check_custom(tool.custom, req, path)  # type: ignore[arg-type]
        if name in kinds:
            raise bad_request(f"Tool name '{name}' is used twice", f"{path}.{kind}.name")
        kinds[name] = kind
    choice = req.tool_choice
    if isinstance(choice, ToolChoiceParam) and choice.type == "allowed_tools":
        _allowed_names(choice, kinds)
        return
    custom = isinstance(choice, ToolChoiceParam) and choice.type == "custom"
    name_param = "tool_choice.custom.name" if custom else "tool_choice.function.name"
    check_tool_choice(choice, kinds, lambda c: _chosen_tool(c, kinds), name_param)


def _check_custom(tool: CustomToolParam, req: ChatCompletionRequest, path: str) -> None:
    """A custom tool has a ``text`` or complete ``grammar`` format and is
    not streamed.

    Raises:
        APIError: 400 naming ``path.type`` (``stream`` is true: OpenAI's
        chat stream schema has no custom tool-call delta) or the format
        field at fault.
    """
    if req.stream:
        raise bad_request(
            "custom tools cannot be streamed on chat completions: OpenAI's chat stream schema has no custom "
            "tool-call delta; send stream: false, or use /v1/responses",
            f"{path}.type",
        )
    fmt = tool.format
    if fmt is None:
        return
    one_of(fmt.type, ("text", "grammar"), f"{path}.custom.format.type")
    if fmt.type == "grammar" and fmt.grammar is None:
        raise bad_request(
            f"Missing required parameter: '{path}.custom.format.grammar'", f"{path}.custom.format.grammar"
        )
    if fmt.type == "text" and fmt.grammar is not None:
        raise bad_request("A text format has no 'grammar'", f"{path}.custom.format.grammar")
    if fmt.grammar is not None:
        one_of(fmt.grammar.syntax, ("lark", "regex"), f"{path}.custom.format.grammar.syntax")


def tool_ref(kind: str, function: Any, custom: Any, path: str, what: str) -> tuple[str, str]:
    """``(kind, name)`` of a tool, tool call or tool reference at ``path``:
    ``type: "function"`` with its ``function`` or ``type: "custom"`` with
    its ``custom``.

    Raises:
        APIError: 400 param ``path.type`` (another type) or
        ``path.function`` / ``path.custom`` (missing).
    """
    if kind == "custom":
        if custom is None:
            raise bad_request(f"Missing required parameter: '{path}.custom'", f"{path}.custom")
        return kind, custom.name
    _check_function_type(kind, function, path, what)
    return kind, function.name


def custom_tool_names(req: ChatCompletionRequest) -> frozenset[str]:
    """The names of the request's custom tools (their calls are answered
    as ``custom`` tool calls)."""
    return frozenset(tool.custom.name for tool in req.tools or () if tool.type == "custom" and tool.custom)


def legacy_functions(req: ChatCompletionRequest) -> bool:
    """Whether ``req`` uses the legacy ``functions`` / ``function_call``
    (its answer then has a message ``function_call`` instead of
    ``tool_calls``, and finish reason ``function_call``)."""
    return req.functions is not None or req.function_call is not None


def _check_functions(req: ChatCompletionRequest) -> None:
    """The legacy ``functions`` (unique names) and ``function_call``
    (``none``, ``auto`` or ``{"name"}`` of one of them); neither mixed
    with ``tools`` / ``tool_choice``.

    Raises:
        APIError: 400 naming the field.
    """
    for name in ("tools", "tool_choice"):
        if getattr(req, name) is not None:
            raise bad_request(f"'{name}' cannot be combined with the legacy 'functions' / 'function_call'", name)
    seen: set[str] = set()
    for index, function in enumerate(req.functions or ()):
        if function.name in seen:
            raise bad_request(f"Function name '{function.name}' is used twice", f"functions[{index}].name")
        seen.add(function.name)
    choice = req.function_call
    if isinstance(choice, str) and choice not in ("none", "auto"):
        raise bad_request(
            f"Invalid value for 'function_call': '{choice}'; expected none, auto or {{\"name\"}}", "function_call"
        )
    if choice is not None and choice != "none" and not seen:
        raise bad_request("'function_call' is only allowed when 'functions' are specified", "function_call")
    if isinstance(choice, ChosenFunction) and choice.name not in seen:
        raise bad_request(f"function_call names '{choice.name}', which is not among 'functions'", "function_call.name")


def _allowed_names(choice: ToolChoiceParam, tool_names: Mapping[str, str]) -> set[str]:
    """The tool names an ``allowed_tools`` choice keeps.

    Raises:
        APIError: 400 param ``tool_choice.allowed_tools`` (missing, or no
        tools at all), ``tool_choice.allowed_tools.mode`` (not ``auto`` or
        ``required``) or ``tool_choice.allowed_tools.tools[i]...`` (not a
        tool of that kind among ``tools``, whose names map to their kinds
        in ``tool_names``).
    """
    allowed = choice.allowed_tools
    if allowed is None:
        raise bad_request("Missing required parameter: 'tool_choice.allowed_tools'", "tool_choice.allowed_tools")
    if not tool_names:
        raise bad_request("'tool_choice' is only allowed when 'tools' are specified", "tool_choice")
    one_of(allowed.mode, ("auto", "required"), "tool_choice.allowed_tools.mode")
    names: set[str] = set()
    for index, ref in enumerate(allowed.tools):
        path = f"tool_choice.allowed_tools.tools[{index}]"
        kind, name = tool_ref(ref.type, ref.function, ref.custom, path, "allowed tool")
        if tool_names.get(name) != kind:
            raise bad_request(f"allowed_tools names {kind} '{name}', which is not among 'tools'", f"{path}.{kind}.name")
        names.add(name)
    return names


def _check_function_type(kind: str, function: object, path: str, what: str) -> None:
    """Require a ``type: "function"`` item (a tool or a tool call at ``path``)
    that has its ``function``.

    Raises:
        APIError: 400 param ``path.type`` or ``path.function``.
    """
    if kind != "function":
        raise not_supported(f"{path}.type", f"{what} type '{kind}'", yet=True)
    if function is None:
        raise bad_request(f"Missing required parameter: '{path}.function'", f"{path}.function")


TOOL_CHOICES = ("none", "auto", "required")
"""The string values of ``tool_choice`` (chat and Responses)."""


def check_tool_choice(
    choice: str | _Choice | None,
    tool_names: Collection[str],
    chosen: Callable[[_Choice], str],
    name_param: str,
) -> None:
    """Check a request's ``tool_choice`` against the names of its tools.

    ``choice`` is absent (None), one of :data:`TOOL_CHOICES`, or an object
    choice, which ``chosen`` checks (raising its own 400 for a malformed
    one) and reduces to the name of the function it forces; ``name_param``
    is the field path such a name is reported at when it is not among
    ``tool_names``. Absent and ``"none"`` are always fine.

    Raises:
        APIError: 400 param ``tool_choice`` for an unknown string value or
        for a choice other than ``"none"`` when there are no tools; the
        400 of ``chosen``; 400 param ``name_param`` for a function name not
        among the tools. Checked in that order.
    """
    if choice is None or choice == "none":
        return
    name: str | None = None
    if isinstance(choice, str):
        if choice not in TOOL_CHOICES:
            raise bad_request(
                f"Invalid value for 'tool_choice': '{choice}'; expected none, auto, required or a function",
                "tool_choice",
            )
    else:
        name = chosen(choice)
    if not tool_names:
        raise bad_request("'tool_choice' is only allowed when 'tools' are specified", "tool_choice")
    if name is not None and name not in tool_names:
        raise bad_request(f"tool_choice names function '{name}', which is not among 'tools'", name_param)


def _chosen_tool(choice: ToolChoiceParam, kinds: Mapping[str, str]) -> str:
    """The tool an object ``tool_choice`` forces: ``{"type": "function",
    "function": {"name"}}`` or ``{"type": "custom", "custom": {"name"}}``
    (``kinds`` maps the tools' names to their kinds).

    Raises:
        APIError: 400 param ``tool_choice.type`` (another type, or a name
        of a tool of the other kind), ``tool_choice.function`` or
        ``tool_choice.custom``.
    """
    kind, name = tool_ref(choice.type, choice.function, choice.custom, "tool_choice", "tool_choice")
    if name in kinds and kinds[name] != kind:
        raise bad_request(f"tool_choice names '{name}', which is a {kinds[name]} tool", "tool_choice.type")
    return name
