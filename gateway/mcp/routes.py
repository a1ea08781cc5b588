"""Starlette endpoints of the configured MCP servers' tools.

``GET /v1/mcp/tools`` lists every connected server's allowed tools with
their input schemas (and each server's state); ``POST /v1/mcp/execute``
runs one tool: body ``{"server": name, "tool": name, "arguments": {...}}``.
Both sit behind the API keys like every ``/v1`` route. Errors use the OpenAI
error shape: 400 for a bad body, an unknown server or tool, or arguments
that break the tool's input schema (also when the server itself refused
them with a JSON-RPC invalid-params error, code ``protocol_error``); 502
when the server is down or the session broke (code ``unavailable``) or
answered any other JSON-RPC error or an invalid result (code
``protocol_error``, the server's error code and message in the message;
the session stays open); 504 when the call passed the server's ``call_timeout``. A
tool that ran and reported an error is a 200 with ``is_error`` true. Every
call is audited by :meth:`gateway.mcp.client.McpHub.call`, and every listing
by :func:`list_tools`.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.core.errors import APIError
from gateway.frontend.error_shapes import openai_error_response
from gateway.mcp.client import McpHub, audit

_STATUS = {"invalid_arguments": 400, "unknown_tool": 400, "unavailable": 502, "protocol_error": 502, "timeout": 504}

INVALID_PARAMS = -32602
"""The JSON-RPC code of a server that refused a call's arguments (or tool name)."""


class ExecuteRequest(msgspec.Struct, forbid_unknown_fields=True):
    """The body of ``POST /v1/mcp/execute``."""

    server: str
    tool: str
    arguments: dict[str, Any] = {}


def hub_of(request: Request) -> McpHub:
    """The app's :class:`McpHub`."""
    return request.app.state.mcp


async def list_tools(request: Request) -> Response:
    """``GET /v1/mcp/tools``: ``{"object": "list", "data": [tools], "servers": [states]}``.

    Logs one audit line on ``mlxd.gateway.mcp.audit``: the servers listed
    (connected ones), the tool count, the duration and the outcome (``ok``,
    or ``partial`` when a configured server is not connected).
    """
    started = time.monotonic()
    hub = hub_of(request)
    tools = hub.tools()
    servers = hub.status()
    body = JSONResponse({"object": "list", "data": [t.to_json() for t in tools], "servers": servers})
    connected = [s["name"] for s in servers if s["connected"]]
    audit.info(
        "mcp list servers=%s tools=%d duration_ms=%d outcome=%s",
        ",".join(connected) or "-",
        len(tools),
        (time.monotonic() - started) * 1000,
        "ok" if len(connected) == len(servers) else "partial",
    )
    return body


async def execute(request: Request) -> Response:
    """``POST /v1/mcp/execute``: run one tool; the result's content blocks,
    its text and ``is_error``, or an error (see the module docstring)."""
    try:
        body = msgspec.json.decode(await request.body(), type=ExecuteRequest)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        return openai_error_response(APIError(400, f"Invalid request body: {exc}", code="invalid_request_error"))
    outcome = await hub_of(request).call(body.server, body.tool, body.arguments, origin="execute")
    if outcome.outcome in _STATUS:
        status = _STATUS[outcome.outcome]
        param = "arguments" if outcome.outcome == "invalid_arguments" else None
        if outcome.outcome == "protocol_error" and outcome.code == INVALID_PARAMS:
            status = 400
        return openai_error_response(APIError(status, outcome.text, param=param, code=outcome.outcome))
    return JSONResponse(
        {
            "object": "mcp.tool_result",
            "server": body.server,
            "tool": body.tool,
            "is_error": not outcome.ok,
            "content": outcome.content,
            "text": outcome.text,
            "structured_content": outcome.structured,
        }
    )
