"""The ``tools`` of a Responses request, and what the model sees of them.

Tool types and their fate:

- ``function``: the model sees it as is (honoured).
- ``custom`` (free-form input, optionally a Lark or regex grammar): the
  model sees a function of that name taking one string argument,
  ``input`` (see :mod:`gateway.frontend.custom_tools`; the grammar is described,
  not enforced). The model's call comes back as a ``custom_tool_call``
  item whose ``input`` is that argument.
- ``namespace``: flattened. Each nested function or custom tool is offered
  under its own name when no other tool has that name, else under
  ``<namespace>__<name>`` (``<namespace><name>`` when the namespace already
  ends in ``_``, as Codex's ``mcp__server__`` ones do); its description is
  prefixed with the namespace's. The call comes back with ``name`` the
  nested name and ``namespace`` the namespace.
- ``additional_tools`` input items (tools a developer adds mid-input) add
  their tools exactly as top-level ``tools`` do.
- ``mcp`` tools at the top level are run by mlxd against the configured
  MCP servers (:mod:`gateway.responses.mcp` rewrites them into function
  tools before this module sees them); inside ``additional_tools`` they are
  dropped.
- Every other type (hosted tools: ``web_search``, ``file_search``,
  ``code_interpreter``, ``image_generation``, ``computer``, ...;
  and the client-run built-ins ``local_shell``, ``shell``,
  ``apply_patch``, ``tool_search``, ``programmatic_tool_calling``, whose
  call items mlxd does not produce) is dropped and reported (see
  :mod:`gateway.frontend.dropped_tools`).

:func:`catalog` checks the list and builds a :class:`ToolCatalog`: the
worker's :class:`~shared.protocol.Tool` list, the map from each
model-facing name back to its :class:`ToolRef`, the echo for the response
object and the dropped types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Sequence, Union

import msgspec
from msgspec import UNSET, UnsetType

from gateway.core.errors import bad_request
from gateway.frontend.custom_tools import custom_tool
from gateway.frontend.validation import JSONObject, ShortText, Text, ToolName
from shared.protocol import Tool

MAX_NAMESPACE_TOOLS = 128
"""Most tools inside one ``namespace``."""
MAX_OFFERED_TOOLS = 512
"""Most function and custom tools one request may offer in all (top level,
inside namespaces and from ``additional_tools`` items)."""


class FunctionToolParam(msgspec.Struct, tag_field="type", tag="function", forbid_unknown_fields=True, kw_only=True):
    """A ``function`` tool; ``parameters`` is its JSON Schema (null or
    absent: no parameters). ``allowed_callers``, ``defer_loading``,
    ``output_schema`` and ``async`` are accepted and have no effect (there
    is one caller, no tool search, and calls are answered in order)."""

    name: ToolName
    description: Text | None = None
    parameters: JSONObject | None = None
    strict: bool | None = None
    allowed_callers: list[ShortText] | None = None
    defer_loading: bool | None = None
    output_schema: JSONObject | None = None
    async_: bool | None = msgspec.field(default=None, name="async")


class CustomFormatParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A custom tool's ``format``: ``{"type": "text"}`` or ``{"type":
    "grammar", "syntax": "lark"|"regex", "definition"}``."""

    type: ShortText
    syntax: ShortText | UnsetType = UNSET
    definition: Text | UnsetType = UNSET


class CustomToolParam(msgspec.Struct, tag_field="type", tag="custom", forbid_unknown_fields=True, kw_only=True):
    """A ``custom`` tool (free-form text input)."""

    name: ToolName
    description: Text | None = None
    format: CustomFormatParam | None = None
    allowed_callers: list[ShortText] | None = None
    defer_loading: bool | None = None
    async_: bool | None = msgspec.field(default=None, name="async")


NestedTool = Union[FunctionToolParam, CustomToolParam]
"""A tool inside a ``namespace``."""


class NamespaceToolParam(msgspec.Struct, tag_field="type", tag="namespace", forbid_unknown_fields=True, kw_only=True):
    """A ``namespace``: function and custom tools under a shared name."""

    name: ToolName
    description: Text
    tools: Annotated[list[NestedTool], msgspec.Meta(max_length=MAX_NAMESPACE_TOOLS)]


DROPPED_TOOL_TYPES = (
    "file_search",
    "computer",
    "computer_use",
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
    "tool_search",
    "apply_patch",
)
"""Tool types that are dropped (see the module docstring)."""

_Dropped = tuple(
    msgspec.defstruct(f"DroppedTool_{kind}", [], tag_field="type", tag=kind) for kind in DROPPED_TOOL_TYPES
)
ToolParam = Union[(FunctionToolParam, CustomToolParam, NamespaceToolParam, *_Dropped)]  # type: ignore[valid-type]
"""A ``tools`` entry."""


@dataclass(frozen=True)
class ToolRef:
    """What a model-facing tool name stands for: a ``function`` or
    ``custom`` tool ``name``, inside ``namespace`` (None: top level)."""

    kind: Literal["function", "custom"]
    name: str
    namespace: str | None = None


@dataclass
class ToolCatalog:
    """The checked tools of one request (see :func:`catalog`).

    ``tools`` are the worker's tools under their model-facing names;
    ``refs`` maps each such name back to its tool; ``echo`` lists the
    request's top-level tools as the response echoes them; ``dropped`` the
    types of the dropped tools, in request order.
    """

    tools: list[Tool] = field(default_factory=list)
    refs: dict[str, ToolRef] = field(default_factory=dict)
    echo: list[Any] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    _names: dict[tuple[str | None, str], str] = field(default_factory=dict)

    def model_name(self, name: str, namespace: str | None) -> str:
        """The model-facing name of tool ``name`` in ``namespace`` (for a
        call in the history); a namespace mlxd was not offered gives the
        qualified name, no namespace the name itself."""
        known = self._names.get((namespace, name))
        if known is not None:
            return known
        return name if namespace is None else qualified(namespace, name)

    def restricted(self, names: set[str]) -> list[Tool]:
        """The worker tools whose model-facing name is in ``names``."""
        return [tool for tool in self.tools if tool.name in names]


def tool_kind(tool: object) -> str:
    """The ``type`` of a decoded ``tools`` entry."""
    return type(tool).__struct_config__.tag  # type: ignore[attr-defined]


def qualified(namespace: str, name: str) -> str:
    """The model-facing name of ``name`` inside ``namespace`` when its own
    name is taken by another tool."""
    return f"{namespace}{name}" if namespace.endswith("_") else f"{namespace}__{name}"


def _check_custom(tool: CustomToolParam, path: str) -> None:
    """A custom tool's ``format`` is ``text`` or a complete ``grammar``.

    Raises:
        APIError: 400 naming the ``format`` field.
    """
    fmt = tool.format
    if fmt is None:
        return
    if fmt.type == "text":
        if fmt.syntax is not UNSET or fmt.definition is not UNSET:
            raise bad_request("A text format has no 'syntax' or 'definition'", f"{path}.format")
        return
    if fmt.type != "grammar":
        raise bad_request(
            f"Invalid custom tool format type '{fmt.type}'; expected text or grammar", f"{path}.format.type"
        )
    if fmt.syntax not in ("lark", "regex"):
        raise bad_request("A grammar format needs 'syntax': 'lark' or 'regex'", f"{path}.format.syntax")
    if fmt.definition is UNSET:
        raise bad_request(f"Missing required parameter: '{path}.format.definition'", f"{path}.format.definition")


@dataclass(frozen=True)
class _Offer:
    """One function or custom tool to offer, where it was found."""

    tool: NestedTool
    path: str
    namespace: NamespaceToolParam | None


def _offers(groups: list[tuple[str, list[Any]]], result: ToolCatalog) -> list[_Offer]:
    """Every function and custom tool of ``groups`` (namespaces opened),
    recording dropped types and the echo of the first group."""
    offers: list[_Offer] = []
    for number, (base, tools) in enumerate(groups):
        for index, tool in enumerate(tools):
            path = f"{base}[{index}]"
            if isinstance(tool, NamespaceToolParam):
                offers += [_Offer(inner, f"{path}.tools[{i}]", tool) for i, inner in enumerate(tool.tools)]
            elif isinstance(tool, (FunctionToolParam, CustomToolParam)):
                offers.append(_Offer(tool, path, None))
            else:
                result.dropped.append(tool_kind(tool))
                continue
            if number == 0:
                result.echo.append(_echo(msgspec.to_builtins(tool)))
    return offers


def _offer(result: ToolCatalog, offer: _Offer, name: str) -> None:
    """Add ``offer`` under the model-facing ``name``.

    Raises:
        APIError: 400 naming the tool's ``name`` when ``name`` is taken.
    """
    tool, namespace = offer.tool, offer.namespace
    if name in result.refs:
        raise bad_request(f"Tool name '{name}' is used twice", f"{offer.path}.name")
    if isinstance(tool, CustomToolParam):
        _check_custom(tool, offer.path)
        grammar = tool.format if tool.format is not None and tool.format.type == "grammar" else None
        syntax = None if grammar is None else grammar.syntax
        definition = None if grammar is None else grammar.definition
        made = custom_tool(name, tool.description, syntax, definition)  # type: ignore[arg-type]
        description, parameters, kind = made.description, made.parameters, "custom"
    else:
        description, parameters, kind = tool.description or "", dict(tool.parameters or {}), "function"
    space = None if namespace is None else namespace.name
    if namespace is not None:
        description = f"[{namespace.name}: {namespace.description}] {description}".rstrip()
    result.tools.append(Tool(name=name, description=description, parameters=parameters))
    result.refs[name] = ToolRef(kind, tool.name, space)  # type: ignore[arg-type]
    result._names[(space, tool.name)] = name


def catalog(tools: list[Any] | None, extra: Sequence[tuple[str, list[Any]]] = ()) -> ToolCatalog:
    """Check ``tools`` (and the tool lists ``extra`` of ``additional_tools``
    input items, each with its field path) and build what the model sees
    (module docstring). A tool inside a namespace is offered under its own
    name when no other tool has it, else under :func:`qualified`.

    Raises:
        APIError: 400 naming a tool ``name`` whose model-facing name is
        taken, or a custom tool's malformed ``format``; 400 param ``tools``
        for more than :data:`MAX_OFFERED_TOOLS` tools in all.
    """
    result = ToolCatalog()
    offers = _offers([("tools", tools or []), *extra], result)
    if len(offers) > MAX_OFFERED_TOOLS:
        raise bad_request(f"At most {MAX_OFFERED_TOOLS} tools may be offered in all; got {len(offers)}", "tools")
    counts: dict[str, int] = {}
    for offer in offers:
        counts[offer.tool.name] = counts.get(offer.tool.name, 0) + 1
    for offer in offers:
        plain = offer.namespace is None or counts[offer.tool.name] == 1
        _offer(result, offer, offer.tool.name if plain else qualified(offer.namespace.name, offer.tool.name))  # type: ignore[union-attr]
    return result


_ALWAYS_ECHOED = ("description", "parameters", "strict")
"""Fields a function tool's echo keeps even when null."""


def _echo(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool as the response lists it: as sent, null fields left out
    except a function's ``description``, ``parameters`` and ``strict``."""
    keep = _ALWAYS_ECHOED if tool.get("type") == "function" else ()
    echoed = {key: value for key, value in tool.items() if value is not None or key in keep}
    if tool.get("type") == "namespace":
        echoed["tools"] = [_echo(inner) for inner in tool["tools"]]
    return echoed
