"""The MCP routes' part of the OpenAPI document: ``GET /v1/mcp/tools`` and
``POST /v1/mcp/execute`` (their bodies are plain objects, described inline).

Assembled with the other parts by :mod:`gateway.openapi_document`.
"""

from __future__ import annotations

from typing import Any

from gateway.frontend.openapi import JSON, OPENAI_ERRORS, PathBuilder


def paths(b: PathBuilder) -> dict[str, Any]:
    """``GET /v1/mcp/tools`` and ``POST /v1/mcp/execute`` (see
    :mod:`gateway.mcp.routes`)."""
    text, obj = {"type": "string"}, {"type": "object"}
    tool = {
        "type": "object",
        "required": ["server", "name", "description", "input_schema"],
        "properties": {
            "server": text,
            "name": text,
            "description": text,
            "input_schema": obj,
            "annotations": {"type": ["object", "null"]},
        },
    }
    server = {
        "type": "object",
        "required": ["name", "transport", "connected", "error"],
        "properties": {
            "name": text,
            "transport": {"enum": ["stdio", "streamable_http"]},
            "connected": {"type": "boolean"},
            "error": {"type": ["string", "null"]},
        },
    }
    listing = {
        "type": "object",
        "required": ["object", "data", "servers"],
        "properties": {
            "object": {"const": "list"},
            "data": {"type": "array", "items": tool},
            "servers": {"type": "array", "items": server},
        },
    }
    result = {
        "type": "object",
        "required": ["object", "server", "tool", "is_error", "content", "text"],
        "properties": {
            "object": {"const": "mcp.tool_result"},
            "server": text,
            "tool": text,
            "is_error": {"type": "boolean"},
            "content": {"type": "array", "items": obj},
            "text": text,
            "structured_content": {"type": ["object", "null"]},
        },
    }
    body = {
        "type": "object",
        "required": ["server", "tool"],
        "additionalProperties": False,
        "properties": {"server": text, "tool": text, "arguments": obj},
    }
    errors = {
        400: "Invalid body, unknown server or tool, or arguments that break the tool's input schema",
        401: OPENAI_ERRORS[401],
        413: OPENAI_ERRORS[413],
        415: OPENAI_ERRORS[415],
        502: "The MCP server is down or its session broke",
        504: "The call ran past the server's `call_timeout`",
    }
    return {
        "/v1/mcp/tools": {
            "get": {
                "operationId": "listMcpTools",
                "summary": "The tools of the configured MCP servers",
                "tags": ["MCP"],
                "responses": {
                    **b.ok("The tools and each server's state", listing),
                    **b.error_responses({401: OPENAI_ERRORS[401]}, False),
                },
            }
        },
        "/v1/mcp/execute": {
            "post": {
                "operationId": "executeMcpTool",
                "summary": "Run one tool of a configured MCP server (audited)",
                "tags": ["MCP"],
                "requestBody": {
                    "required": True,
                    "content": {
                        JSON: {
                            "schema": body,
                            "example": {"server": "calc", "tool": "add", "arguments": {"a": 1, "b": 2}},
                        }
                    },
                },
                "responses": {
                    **b.ok("The tool's result (`is_error` when the tool reported a failure)", result),
                    **b.error_responses(errors, False),
                },
            }
        },
    }
