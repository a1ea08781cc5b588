"""How a ``POST /v1/messages`` request with ``mcp_servers`` is bound and
rewritten for the worker (the loop itself is :mod:`gateway.anthropic.mcp`).

The server-side MCP tool loop of ``POST /v1/messages`` (``mcp_servers``).

Each ``mcp_servers`` entry (``{"type": "url", "url", "name",
"authorization_token", "tool_configuration"}``) must name a server of the
config's ``[[mcp_servers]]`` by ``name`` and repeat its ``url``; a stdio
server's URL is ``stdio://<name>``. Anything else is a 400, so a request can
never make mlxd start a command or reach a new URL; ``authorization_token``
is refused (mlxd uses the configured credentials only).
``tool_configuration.enabled`` false offers none of the server's tools;
``allowed_tools`` keeps the listed ones. The current connector's form, a
``{"type": "mcp_toolset", "mcp_server_name", "default_config", "configs",
"tools"}`` entry in ``tools``, selects a listed server's tools instead:
``default_config.enabled`` (default true) with per-tool ``configs``
overrides, and a pinned ``tools`` listing keeps exactly the named tools;
``defer_loading`` is accepted and means nothing here (every offered tool is
in the prompt from the start). A toolset naming a server that is not in
``mcp_servers``, two toolsets for one server, or a toolset together with
that server's ``tool_configuration`` is a 400.

:func:`plan` offers the servers' tools to the model as custom tools of
their own names; :func:`replay_messages` turns ``mcp_tool_use`` /
``mcp_tool_result`` blocks of the input into tool calls and results;
:func:`count_body` is the ``count_tokens`` body. Pure data on the event
loop; reads the hub's tool lists, never calls a server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gateway.core.errors import bad_request
from gateway.frontend.validation import peek_object
from gateway.mcp.client import McpHub, McpTool

_ENTRY_FIELDS = {"type", "url", "name", "authorization_token", "tool_configuration"}


def names_mcp_servers(body: bytes) -> bool:
    """Whether ``body`` is a JSON object with a non-empty ``mcp_servers``."""
    data = peek_object(body, b'"mcp_servers"')
    return data is not None and isinstance(data.get("mcp_servers"), list) and bool(data["mcp_servers"])


def server_url(hub: McpHub, name: str) -> str | None:
    """The URL a request names configured server ``name`` by (None: no such server)."""
    conn = hub.by_label(name)
    if conn is None:
        return None
    return conn.config.url or f"stdio://{name}"


@dataclass
class McpPlan:
    """The rewritten request: its body, the MCP tool owners, the rounds."""

    body: dict[str, Any]
    owner: dict[str, str]
    tools: dict[str, McpTool]


def plan(hub: McpHub, data: dict[str, Any]) -> McpPlan:
    """Bind ``mcp_servers`` and rewrite the body (module docstring).

    Raises:
        APIError: 400 naming the offending ``mcp_servers`` field or tool name.
    """
    owner: dict[str, str] = {}
    offered: dict[str, McpTool] = {}
    toolsets = _toolsets(data)
    client_tools = [t for t in data.get("tools") or [] if not (isinstance(t, dict) and t.get("type") == "mcp_toolset")]
    client_names = {t.get("name") for t in client_tools if isinstance(t, dict)}
    added = []
    seen = set()
    for index, entry in enumerate(data["mcp_servers"]):
        path = f"mcp_servers[{index}]"
        if not isinstance(entry, dict):
            raise bad_request("An MCP server is an object", path)
        for key in entry:
            if key not in _ENTRY_FIELDS:
                raise bad_request(f"{path}.{key}: Extra inputs are not permitted", f"{path}.{key}")
        if entry.get("type") != "url":
            raise bad_request(f"{path}.type: Input should be 'url'", f"{path}.type")
        if entry.get("authorization_token") is not None:
            raise bad_request(
                f"{path}.authorization_token: not supported; mlxd uses the credentials of its config",
                f"{path}.authorization_token",
            )
        name, url = entry.get("name"), entry.get("url")
        want = server_url(hub, name) if isinstance(name, str) else None
        if want is None:
            raise bad_request(f"{path}.name: no MCP server named {name!r} is configured on this server", f"{path}.name")
        if not isinstance(url, str) or url.rstrip("/") != want.rstrip("/"):
            raise bad_request(f"{path}.url: not the URL configured for {name!r}", f"{path}.url")
        if name in seen:
            raise bad_request(f"{path}.name: MCP server {name!r} is listed twice", f"{path}.name")
        seen.add(name)
        config = entry.get("tool_configuration") or {}
        toolset = toolsets.pop(name, None)
        if toolset is not None and entry.get("tool_configuration") is not None:
            raise bad_request(
                f"{path}.tool_configuration: server {name!r} is also configured by an mcp_toolset; use one",
                f"{path}.tool_configuration",
            )
        if config.get("enabled") is False:
            continue
        allowed = config.get("allowed_tools")
        server_tools = hub.by_label(name).tools  # type: ignore[union-attr]
        if toolset is not None:
            _check_pinned(toolset, server_tools)
        for tool_name, tool in server_tools.items():
            if allowed is not None and tool_name not in allowed:
                continue
            if toolset is not None and not toolset.enables(tool_name):
                continue
            if tool_name in owner or tool_name in client_names:
                raise bad_request(f"{path}: tool name {tool_name!r} is offered twice", path)
            owner[tool_name] = name
            offered[tool_name] = tool
            added.append({"name": tool_name, "description": tool.description, "input_schema": tool.input_schema})
    if toolsets:
        (index, name) = min((t.index, n) for n, t in toolsets.items())
        raise bad_request(
            f"tools[{index}].mcp_server_name: {name!r} is not in mcp_servers", f"tools[{index}].mcp_server_name"
        )
    body = {k: v for k, v in data.items() if k not in ("mcp_servers", "stream")}
    body["tools"] = client_tools + added
    body["messages"] = replay_messages(data.get("messages") or [])
    return McpPlan(body, owner, offered)


@dataclass
class _Toolset:
    """One ``mcp_toolset`` entry of ``tools``: where it stands, which of its
    server's tools it enables, and its pinned listing (None: not pinned)."""

    index: int
    default_enabled: bool
    overrides: dict[str, bool]
    pinned: list[str] | None

    def enables(self, tool_name: str) -> bool:
        """Whether the toolset offers ``tool_name`` of its server."""
        if self.pinned is not None and tool_name not in self.pinned:
            return False
        return self.overrides.get(tool_name, self.default_enabled)


_TOOLSET_FIELDS = {"type", "mcp_server_name", "default_config", "configs", "tools", "cache_control"}
_TOOL_CONFIG_FIELDS = {"enabled", "defer_loading"}


def _tool_config(value: Any, path: str) -> dict[str, Any]:
    """A ``default_config`` or ``configs`` entry, checked (400 otherwise)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad_request(f"{path}: an object is required", path)
    for key, item in value.items():
        if key not in _TOOL_CONFIG_FIELDS:
            raise bad_request(f"{path}.{key}: Extra inputs are not permitted", f"{path}.{key}")
        if not isinstance(item, bool):
            raise bad_request(f"{path}.{key}: Input should be a valid boolean", f"{path}.{key}")
    return value


def _toolsets(data: dict[str, Any]) -> dict[str, _Toolset]:
    """The request's ``mcp_toolset`` tools by server name.

    Raises:
        APIError: 400 naming the offending field of a malformed toolset.
    """
    found: dict[str, _Toolset] = {}
    for index, tool in enumerate(data.get("tools") or []):
        if not (isinstance(tool, dict) and tool.get("type") == "mcp_toolset"):
            continue
        path = f"tools[{index}]"
        for key in tool:
            if key not in _TOOLSET_FIELDS:
                raise bad_request(f"{path}.{key}: Extra inputs are not permitted", f"{path}.{key}")
        name = tool.get("mcp_server_name")
        if not isinstance(name, str):
            raise bad_request(f"{path}.mcp_server_name: Field required", f"{path}.mcp_server_name")
        if name in found:
            raise bad_request(
                f"{path}.mcp_server_name: {name!r} has two mcp_toolset entries", f"{path}.mcp_server_name"
            )
        default = _tool_config(tool.get("default_config"), f"{path}.default_config")
        configs = tool.get("configs") or {}
        if not isinstance(configs, dict):
            raise bad_request(f"{path}.configs: an object is required", f"{path}.configs")
        overrides = {}
        for tool_name, config in configs.items():
            enabled = _tool_config(config, f"{path}.configs.{tool_name}").get("enabled")
            if enabled is not None:
                overrides[tool_name] = enabled
        pinned = tool.get("tools")
        names = None
        if pinned is not None:
            if not isinstance(pinned, list) or not all(
                isinstance(t, dict) and isinstance(t.get("name"), str) for t in pinned
            ):
                raise bad_request(f"{path}.tools: a list of tools with names is required", f"{path}.tools")
            names = [t["name"] for t in pinned]
        found[name] = _Toolset(index, default.get("enabled", True), overrides, names)
    return found


def _check_pinned(toolset: _Toolset, server_tools: dict[str, McpTool]) -> None:
    """A pinned listing may only name tools the server has (400 otherwise)."""
    for name in toolset.pinned or ():
        if name not in server_tools:
            path = f"tools[{toolset.index}].tools"
            raise bad_request(f"{path}: the MCP server has no tool named {name!r}", path)


def count_body(hub: McpHub, raw: bytes) -> bytes:
    """A ``count_tokens`` body with its ``mcp_servers`` as the tools they offer.

    Raises:
        APIError: 400 as :func:`plan`.
    """
    return json.dumps(plan(hub, json.loads(raw)).body).encode()


def replay_messages(messages: list[Any]) -> list[Any]:
    """The messages with ``mcp_tool_use`` / ``mcp_tool_result`` blocks as
    ``tool_use`` blocks and ``tool_result`` blocks of a user turn."""
    out: list[Any] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list) or not any(
            isinstance(b, dict) and b.get("type") in ("mcp_tool_use", "mcp_tool_result") for b in content
        ):
            out.append(message)
            continue
        role = message.get("role")
        current: list[Any] = []
        for block in content:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "mcp_tool_use":
                current.append({"type": "tool_use", "id": block["id"], "name": block["name"], "input": block["input"]})
            elif kind == "mcp_tool_result":
                if current:
                    out.append({"role": role, "content": current})
                current = []
                out.append({"role": "user", "content": [_tool_result(block)]})
            else:
                current.append(block)
        if current:
            out.append({"role": role, "content": current})
    return out


def _tool_result(block: dict[str, Any]) -> dict[str, Any]:
    """An ``mcp_tool_result`` block as a ``tool_result`` block."""
    return {
        "type": "tool_result",
        "tool_use_id": block["tool_use_id"],
        "content": block.get("content", ""),
        "is_error": bool(block.get("is_error")),
    }
