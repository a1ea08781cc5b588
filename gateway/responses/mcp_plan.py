"""How a ``POST /v1/responses`` request with MCP tools is rewritten for the
worker (step 1 of the loop in :mod:`gateway.responses.mcp`).

:func:`has_mcp_tool` tells such a body apart; :func:`bind` checks each
``{"type": "mcp", ...}`` entry against the configured ``[[mcp_servers]]``
(a 400 for anything else: a request can never make mlxd start a command or
reach a new URL) and :func:`plan` rewrites the body: every allowed MCP tool
becomes a ``function`` tool of its own name, an ``mcp`` ``tool_choice``
becomes the function choice of the first round, and ``mcp_list_tools`` /
``mcp_call`` / ``mcp_approval_*`` input items become calls and results
(:func:`replay_input`). Pure data on the event loop; reads the hub's tool
lists, never calls a server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gateway.core.errors import bad_request
from gateway.frontend.validation import peek_object
from gateway.mcp.client import McpHub, McpTool
from gateway.responses.tools import echo_tool

_MCP_FIELDS = {
    "type",
    "server_label",
    "server_url",
    "allowed_tools",
    "require_approval",
    "server_description",
    "defer_loading",
    "allowed_callers",
    "headers",
    "authorization",
    "connector_id",
    "tunnel_id",
}


def has_mcp_tool(body: bytes) -> bool:
    """Whether ``body`` is a JSON object whose ``tools`` hold an ``mcp`` tool."""
    data = peek_object(body, b'"mcp"')
    tools = data.get("tools") if data is not None else None
    return isinstance(tools, list) and any(isinstance(t, dict) and t.get("type") == "mcp" for t in tools)


@dataclass
class Binding:
    """One request ``mcp`` tool bound to its configured server: the tools it
    exposes, which of them need approval, and the server's last error when
    it is down (reported in the ``mcp_list_tools`` item)."""

    label: str
    tools: dict[str, McpTool]
    approval: Any
    error: str | None = None

    def needs_approval(self, name: str) -> bool:
        """Whether a call to ``name`` must be approved by the client first."""
        rule = self.approval
        if rule == "never":
            return False
        if isinstance(rule, dict):
            never = rule.get("never") or {}
            if name in (never.get("tool_names") or []):
                return False
            if never.get("read_only") and _read_only(self.tools.get(name)):
                return False
        return True


def _read_only(tool: McpTool | None) -> bool:
    return bool(tool and tool.annotations and tool.annotations.get("readOnlyHint"))


def _filter(names: Any) -> tuple[list[str] | None, bool]:
    """An ``allowed_tools`` value as (names or None, read_only)."""
    if names is None:
        return None, False
    if isinstance(names, list):
        return [str(n) for n in names], False
    if isinstance(names, dict):
        listed = names.get("tool_names")
        return (None if listed is None else [str(n) for n in listed]), bool(names.get("read_only"))
    raise bad_request("'allowed_tools' must be a list of names or {tool_names, read_only}", "tools")


def bind(hub: McpHub, tools: list[Any]) -> dict[str, Binding]:
    """Bind each ``mcp`` entry of ``tools`` to its configured server.

    Raises:
        APIError: 400 naming the entry's field: unknown label, a URL that is
        not the configured server's, refused fields, unknown fields.
    """
    bindings: dict[str, Binding] = {}
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "mcp":
            continue
        path = f"tools[{index}]"
        for key in tool:
            if key not in _MCP_FIELDS:
                raise bad_request(f"Unrecognized field '{key}' in an mcp tool", f"{path}.{key}")
        for key in ("connector_id", "tunnel_id", "headers", "authorization"):
            if tool.get(key) not in (None, {}):
                raise bad_request(
                    f"'{key}' is not supported: mlxd reaches only the MCP servers of its config, with their "
                    "configured credentials",
                    f"{path}.{key}",
                )
        label = tool.get("server_label")
        if not isinstance(label, str):
            raise bad_request(f"Missing required parameter: '{path}.server_label'", f"{path}.server_label")
        conn = hub.by_label(label)
        if conn is None:
            raise bad_request(f"No MCP server labelled '{label}' is configured on this server", f"{path}.server_label")
        url = tool.get("server_url")
        if url is not None and (not conn.config.url or conn.config.url.rstrip("/") != str(url).rstrip("/")):
            raise bad_request(f"'server_url' is not the URL configured for '{label}'", f"{path}.server_url")
        if label in bindings:
            raise bad_request(f"MCP server '{label}' is listed twice", f"{path}.server_label")
        names, read_only = _filter(tool.get("allowed_tools"))
        exposed = {
            name: t
            for name, t in conn.tools.items()
            if (names is None or name in names) and (not read_only or _read_only(t))
        }
        error = None if conn.tools or conn.error is None else conn.error
        bindings[label] = Binding(label, exposed, tool.get("require_approval", "always") or "always", error)
    return bindings


@dataclass
class McpPlan:
    """The rewritten request and what the response echoes."""

    body: dict[str, Any]
    input: list[dict[str, Any]]
    owner: dict[str, Binding]
    echo_tools: list[Any]
    echo_choice: Any
    first_choice: Any
    bindings: dict[str, Binding] = field(default_factory=dict)
    approved: list[tuple[dict[str, Any], Binding]] = field(default_factory=list)


def plan(hub: McpHub, data: dict[str, Any]) -> McpPlan:
    """Rewrite the request (see the module docstring, step 1).

    Raises:
        APIError: 400 for a refused ``mcp`` entry, a tool name used twice, an
        ``mcp`` tool choice naming an unknown server or tool.
    """
    tools = data.get("tools") or []
    bindings = bind(hub, tools)
    owner: dict[str, Binding] = {}
    rewritten: list[Any] = []
    client_names = {t.get("name") for t in tools if isinstance(t, dict) and t.get("type") != "mcp"}
    for tool in tools:
        if not (isinstance(tool, dict) and tool.get("type") == "mcp"):
            rewritten.append(tool)
            continue
        binding = bindings[tool["server_label"]]
        for name, spec in binding.tools.items():
            if name in owner or name in client_names:
                raise bad_request(f"Tool name '{name}' is offered twice (MCP server '{binding.label}')", "tools")
            owner[name] = binding
            rewritten.append(
                {"type": "function", "name": name, "description": spec.description, "parameters": spec.input_schema}
            )
    choice = data.get("tool_choice")
    first_choice = choice
    if isinstance(choice, dict) and choice.get("type") == "mcp":
        label, name = choice.get("server_label"), choice.get("name")
        if label not in bindings:
            raise bad_request(f"tool_choice names MCP server '{label}', which is not in 'tools'", "tool_choice")
        if name is None:
            first_choice = "required"
        elif owner.get(name) is not bindings[label]:
            raise bad_request(f"MCP server '{label}' offers no tool '{name}'", "tool_choice.name")
        else:
            first_choice = {"type": "function", "name": name}
    body = {k: v for k, v in data.items() if k not in ("tools", "tool_choice", "input", "stream", "stream_options")}
    body["tools"] = rewritten
    echo = [echo_tool(t) if isinstance(t, dict) else t for t in tools]
    result = McpPlan(body, [], owner, echo, choice, first_choice, bindings)
    result.input = replay_input(data.get("input"), bindings, result)
    return result


def replay_input(items: Any, bindings: dict[str, Binding], result: McpPlan) -> list[dict[str, Any]]:
    """The input with MCP items turned into calls and results."""
    if isinstance(items, str) or items is None:
        return [{"role": "user", "content": items or ""}]
    out: list[dict[str, Any]] = []
    requests: dict[str, dict[str, Any]] = {}
    for index, item in enumerate(items):
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "mcp_list_tools":
            continue
        if kind == "mcp_call":
            output = item.get("output") or json.dumps(item.get("error")) or ""
            out += call_pair(item["id"], item["name"], item.get("arguments", "{}"), output)
        elif kind == "mcp_approval_request":
            requests[item.get("id", "")] = item
        elif kind == "mcp_approval_response":
            asked = requests.get(item.get("approval_request_id", ""))
            if asked is None:
                raise bad_request(
                    "An mcp_approval_response must follow its mcp_approval_request in 'input'",
                    f"input[{index}].approval_request_id",
                )
            binding = bindings.get(asked.get("server_label", ""))
            if binding is None or asked.get("name") not in binding.tools:
                raise bad_request("The approved MCP tool is not offered by this request", f"input[{index}]")
            if item.get("approve"):
                result.approved.append((asked, binding))
                out.append({"type": "_approved", "request": asked})
            else:
                out += call_pair(asked["id"], asked["name"], asked.get("arguments", "{}"), "The user declined.")
        else:
            out.append(item)
    return out


def call_pair(call_id: str, name: str, arguments: str, output: str) -> list[dict[str, Any]]:
    """A function call and its output, as input items."""
    return [
        {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments},
        {"type": "function_call_output", "call_id": call_id, "output": output},
    ]
