"""The ``tools`` list of an Anthropic Messages request, sorted into what mlxd
offers the model and what it drops.

Every tool type of the current Messages API (GA and beta) is recognised by
its ``type``; an unknown ``type`` is a 400 naming it. Three kinds:

* **custom tools** (no ``type`` or ``"custom"``): offered as they are.
  ``input_examples`` are appended to the description (as JSON lines) so the
  model sees them; ``strict``, ``eager_input_streaming``, ``defer_loading``
  and ``allowed_callers`` are accepted (mlxd enforces a tool's schema with a
  grammar whenever the call is forced, always streams arguments as they are
  generated, always renders every tool, and only ever has direct callers).
* **Anthropic-defined client tools** the client itself executes:
  ``bash_*``, ``text_editor_*`` and ``memory_*``. The model needs their
  input schema, which the API leaves implicit; mlxd offers each as a custom
  tool with the documented input fields (:data:`CLIENT_TOOL_SCHEMAS`), so
  the calls come back as ordinary ``tool_use`` blocks for the client to run.
* **tools mlxd cannot run or represent**: hosted server tools (web search,
  web fetch, code execution, tool search, advisor, MCP toolsets) and the
  computer/browser tools (they need a model that sees screenshots). They are
  dropped, not refused: the turn runs without them, the gateway logs them
  and names them (their ``type``) in the ``x-mlxd-dropped-tools`` response
  header (:mod:`gateway.frontend.dropped_tools`). A ``tool_choice`` naming a dropped tool is a 400.

:func:`offered_tools` does the sorting; no I/O, any thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from gateway.frontend.validation import decode_body, field_error
from shared.protocol import Tool

ToolName = Annotated[str, Meta(pattern=r"^[a-zA-Z0-9_-]{1,128}$")]
"""A custom tool's name: 1..128 characters of ``[a-zA-Z0-9_-]``."""

Caller = Literal["direct", "code_execution_20250825", "code_execution_20260120", "code_execution_20260521"]


class CacheControl(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A prompt-caching breakpoint ``{"type": "ephemeral", "ttl"?}``: mlxd's
    prefix cache reuses every shared prefix without markers."""

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class CustomTool(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A client-side tool: ``input_schema`` is the JSON Schema of its input
    (an object schema)."""

    name: ToolName
    input_schema: dict[str, Any]
    description: str | None = None
    type: Literal["custom"] | None = None
    cache_control: CacheControl | None = None
    allowed_callers: list[Caller] | None = None
    defer_loading: bool | None = None
    eager_input_streaming: bool | None = None
    input_examples: list[dict[str, Any]] | None = None
    strict: bool | None = None


class ClientTool(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """An Anthropic-defined tool the client executes (bash, text editor,
    memory): a fixed ``name`` per ``type`` and a few options."""

    type: str
    name: str
    cache_control: CacheControl | None = None
    allowed_callers: list[Caller] | None = None
    defer_loading: bool | None = None
    input_examples: list[dict[str, Any]] | None = None
    strict: bool | None = None
    max_characters: int | None = None


class _ToolKind(msgspec.Struct, kw_only=True):
    """Only a tool's ``type`` and ``name``, read first to route the rest."""

    type: Any = None
    name: Any = None


_EDITOR_FIELDS: dict[str, Any] = {
    "path": {"type": "string", "description": "Absolute path of the file or directory."},
    "file_text": {"type": "string", "description": "Content of the file to create (create)."},
    "old_str": {"type": "string", "description": "Exact text to replace (str_replace)."},
    "new_str": {"type": "string", "description": "Replacement text (str_replace) or text to insert (insert)."},
    "insert_line": {"type": "integer", "description": "Line after which to insert; 0 is the start (insert)."},
    "view_range": {
        "type": "array",
        "items": {"type": "integer"},
        "minItems": 2,
        "maxItems": 2,
        "description": "First and last line to show, -1 for the end (view).",
    },
}


def _editor_schema(commands: list[str]) -> dict[str, Any]:
    """The text editor's input schema with ``commands`` allowed."""
    command = {"type": "string", "enum": commands, "description": "The editing command to run."}
    return {"type": "object", "properties": {"command": command, **_EDITOR_FIELDS}, "required": ["command", "path"]}


_BASH = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "The shell command to run."},
        "restart": {"type": "boolean", "description": "Restart the shell session instead of running a command."},
    },
}
_MEMORY = {
    "type": "object",
    "properties": {
        "command": {
            "type": "string",
            "enum": ["view", "create", "str_replace", "insert", "delete", "rename"],
            "description": "The memory command to run.",
        },
        **_EDITOR_FIELDS,
        "insert_text": {"type": "string", "description": "Text to insert (insert)."},
        "old_path": {"type": "string", "description": "Path to rename (rename)."},
        "new_path": {"type": "string", "description": "New path (rename)."},
    },
    "required": ["command"],
}
_EDIT = ["view", "create", "str_replace", "insert"]

CLIENT_TOOL_SCHEMAS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "bash_20241022": ("bash", "Run a command in a persistent bash shell.", _BASH),
    "bash_20250124": ("bash", "Run a command in a persistent bash shell.", _BASH),
    "text_editor_20241022": (
        "str_replace_editor",
        "View, create and edit text files.",
        _editor_schema([*_EDIT, "undo_edit"]),
    ),
    "text_editor_20250124": (
        "str_replace_editor",
        "View, create and edit text files.",
        _editor_schema([*_EDIT, "undo_edit"]),
    ),
    "text_editor_20250429": ("str_replace_based_edit_tool", "View, create and edit text files.", _editor_schema(_EDIT)),
    "text_editor_20250728": ("str_replace_based_edit_tool", "View, create and edit text files.", _editor_schema(_EDIT)),
    "memory_20250818": ("memory", "Read and write files in the /memories directory.", _MEMORY),
}
"""Anthropic-defined client tools mlxd offers as custom tools:
``type -> (name, description, input_schema)``."""

DROPPED_TOOL_TYPES = frozenset(
    {
        "web_search_20250305",
        "web_search_20260209",
        "web_search_20260318",
        "web_fetch_20250910",
        "web_fetch_20260209",
        "web_fetch_20260309",
        "web_fetch_20260318",
        "code_execution_20250522",
        "code_execution_20250825",
        "code_execution_20260120",
        "code_execution_20260521",
        "tool_search_tool_bm25_20251119",
        "tool_search_tool_bm25",
        "tool_search_tool_regex_20251119",
        "tool_search_tool_regex",
        "advisor_20260301",
        "mcp_toolset",
        "computer_20241022",
        "computer_20250124",
        "computer_20251124",
        "computer_toolset_20260801",
        "browser_toolset_20260801",
    }
)
"""Tool types mlxd drops: hosted server tools it cannot run and tools that
need vision (computer, browser)."""


@dataclass
class ToolSet:
    """What a request's ``tools`` become: ``tools`` offered to the model (in
    request order), ``dropped`` the types left out, ``names`` of the dropped
    tools (for ``tool_choice`` checks)."""

    tools: list[Tool] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    dropped_names: set[str] = field(default_factory=set)


_kind_decoder = msgspec.json.Decoder(_ToolKind)
_custom_decoder = msgspec.json.Decoder(CustomTool)
_client_decoder = msgspec.json.Decoder(ClientTool)
_encoder = msgspec.json.Encoder()


def _described(description: str, examples: list[dict[str, Any]] | None) -> str:
    """``description`` with each input example appended as a JSON line."""
    if not examples:
        return description
    lines = "\n".join(_encoder.encode(example).decode() for example in examples)
    return f"{description}\n\nExample inputs:\n{lines}".strip()


def offered_tools(raw_tools: list[msgspec.Raw]) -> ToolSet:
    """Sort the request's ``tools`` (see the module docstring); each tool
    is decoded on its own, its errors in Anthropic's wording with the
    tool's path (``tools[i]...``).

    Raises:
        APIError: 400 for an unknown tool type, an invalid tool, a custom
        ``input_schema`` that is not an object schema, or a repeated name.
    """
    result = ToolSet()
    seen: set[str] = set()
    for index, raw in enumerate(raw_tools):
        path = f"tools[{index}]"
        data = bytes(raw)
        kind = decode_body(_kind_decoder, data, "anthropic", path)
        if kind.type in DROPPED_TOOL_TYPES:
            result.dropped.append(kind.type)
            if isinstance(kind.name, str):
                result.dropped_names.add(kind.name)
            continue
        tool = _offered(kind.type, data, path)
        if tool.name in seen:
            raise field_error(f"{path}.name", f"tool name '{tool.name}' is used more than once")
        seen.add(tool.name)
        result.tools.append(tool)
    return result


def _offered(kind: Any, data: bytes, path: str) -> Tool:
    """One tool mlxd offers: a custom tool or an Anthropic-defined client tool.

    Raises:
        APIError: 400 as :func:`offered_tools`.
    """
    if kind in (None, "custom"):
        custom: CustomTool = decode_body(_custom_decoder, data, "anthropic", path)
        if custom.input_schema.get("type") != "object":
            raise field_error(f"{path}.input_schema.type", "must be 'object'")
        description = _described(custom.description or "", custom.input_examples)
        return Tool(name=custom.name, description=description, parameters=custom.input_schema)
    if kind in CLIENT_TOOL_SCHEMAS:
        name, description, schema = CLIENT_TOOL_SCHEMAS[kind]
        client: ClientTool = decode_body(_client_decoder, data, "anthropic", path)
        if client.name != name:
            raise field_error(f"{path}.name", f"a '{kind}' tool must be named '{name}', got '{client.name}'")
        return Tool(name=name, description=_described(description, client.input_examples), parameters=schema)
    shown = kind if isinstance(kind, str) else _encoder.encode(kind).decode()
    raise field_error(f"{path}.type", f"unknown tool type '{shown}'")
