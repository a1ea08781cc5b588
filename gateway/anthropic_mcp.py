"""The server-side MCP tool loop of ``POST /v1/messages`` (``mcp_servers``).

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

The loop (on the event loop; each round an ordinary worker request): the
servers' tools are offered to the model as custom tools of their own names;
the request's ``tool_choice`` applies to the first round only (later rounds
``auto``, the last of ``server.mcp_max_rounds`` rounds ``none``). The
model's calls to MCP tools are run and reported as ``mcp_tool_use`` and
``mcp_tool_result`` blocks; their results go back to the model as tool
results and it runs again. Calls to the client's own tools end the loop
with ``stop_reason`` ``tool_use`` as usual. ``mcp_tool_use`` /
``mcp_tool_result`` blocks in the input (from an earlier answer) are
replayed as tool calls and results.

Streaming sends ``message_start`` at once, then each round's content
blocks when that round has finished (text as one delta per block, tool
input as one ``input_json_delta``), each MCP call's ``mcp_tool_use`` block
before it runs and its ``mcp_tool_result`` block when it ends,
then ``message_delta`` and ``message_stop``; an error in a later round
ends the stream with an ``error`` event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import Response

from gateway import anthropic_format as fmt
from gateway import sse
from gateway.anthropic_routes import (
    REQUEST_ID_HEADER,
    _edited,
    _images,
    _Job,
    _json_response,
    anthropic_error_response,
    collect,
)
from gateway.anthropic_schema import decode_messages_request, tool_set
from gateway.anthropic_translate import omit_thinking, to_generate_request
from gateway.dropped_tools import dropped_headers
from gateway.errors import APIError, bad_request
from gateway.mcp_client import CallOutcome, McpHub, McpTool
from gateway.request_flow import engine_of, next_output, respond_after_first_output
from shared.protocol import RequestOutput

_ENTRY_FIELDS = {"type", "url", "name", "authorization_token", "tool_configuration"}


def wants_mcp(body: bytes) -> bool:
    """Whether ``body`` is a JSON object with a non-empty ``mcp_servers``."""
    if b'"mcp_servers"' not in body:
        return False
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and isinstance(data.get("mcp_servers"), list) and bool(data["mcp_servers"])


def server_url(hub: McpHub, name: str) -> str | None:
    """The URL a request names configured server ``name`` by (None: no such server)."""
    conn = hub.by_label(name)
    if conn is None:
        return None
    return conn.config.url or f"stdio://{name}"


@dataclass
class _Plan:
    """The rewritten request: its body, the MCP tool owners, the rounds."""

    body: dict[str, Any]
    owner: dict[str, str]
    tools: dict[str, McpTool]


def plan(hub: McpHub, data: dict[str, Any]) -> _Plan:
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
    body["messages"] = _replay(data.get("messages") or [])
    return _Plan(body, owner, offered)


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


def _replay(messages: list[Any]) -> list[Any]:
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


def _add_usage(total: dict[str, Any], more: dict[str, Any]) -> None:
    """Add the token counts of ``more`` to ``total``."""
    for key, value in more.items():
        if isinstance(value, int) and not isinstance(value, bool):
            total[key] = (total.get(key) or 0) + value
        elif key not in total:
            total[key] = value


class McpRounds:
    """The rounds of one request; :meth:`run` yields the finished content
    blocks as they come (each round's, then each MCP call's pair), and sets
    ``message`` (the final message object) or ``failed``."""

    def __init__(self, request: Request, plan_: _Plan, message_id: str) -> None:
        self._request = request
        self._plan = plan_
        self.id = message_id
        self.message: dict[str, Any] | None = None
        self.failed: RequestOutput | None = None
        self.max_rounds = request.app.state.config.server.mcp_max_rounds
        self.choice = plan_.body.get("tool_choice")

    def body(self, round_: int) -> bytes:
        """The body of round ``round_``."""
        body = dict(self._plan.body)
        if round_ > 0:
            body["tool_choice"] = {"type": "none" if round_ >= self.max_rounds - 1 else "auto"}
        return json.dumps(body).encode()

    async def submit(self, round_: int) -> _Job:
        """Submit round ``round_`` (as the API's own request path does).

        Raises:
            APIError: 400 invalid body, 404 unknown model, 503 overloaded.
        """
        req = decode_messages_request(self.body(round_))
        engine = engine_of(self._request)
        model = engine.resolve(req.model)
        generate = to_generate_request(req, self.id, _images(self._request))
        generate, applied = await _edited(engine, model, generate, req)
        headers = dropped_headers(tool_set(req).dropped, self._request.url.path)
        stream = await engine.submit(model, generate)
        return _Job(generate, model, False, stream, headers, omit_thinking(req), applied)

    async def run(self, job: _Job, first: RequestOutput) -> AsyncIterator[list[dict[str, Any]]]:
        """Yield content blocks round by round until the loop ends."""
        content: list[dict[str, Any]] = []
        usage: dict[str, Any] = {}
        round_ = 0
        while True:
            try:
                collected = await collect(job, first)
            finally:
                await job.stream.aclose()
            if isinstance(collected, RequestOutput):
                self.failed = collected
                return
            message = json.loads(collected.body())
            _add_usage(usage, message["usage"])
            blocks = message["content"]
            calls = [b for b in blocks if b["type"] == "tool_use" and b["name"] in self._plan.owner]
            others = [b for b in blocks if not (b["type"] == "tool_use" and b["name"] in self._plan.owner)]
            client_calls = [b for b in others if b["type"] == "tool_use"]
            last = not calls or round_ >= self.max_rounds - 1
            shown = others if last else [b for b in others if b["type"] != "tool_use"]
            content += shown
            if shown:
                yield shown
            if not last:
                results = []
                for call in calls:
                    use = self._use_block(call)
                    content.append(use)
                    yield [use]  # sent before the call runs
                    block, result = await self._call(call)
                    content.append(block)
                    results.append(result)
                    yield [block]
                if client_calls:  # the client's calls end the loop, after the MCP ones ran
                    content += client_calls
                    yield client_calls
                else:
                    assistant = [b for b in blocks if b["type"] == "tool_use" or (b["type"] == "text" and b["text"])]
                    self._plan.body["messages"] = [
                        *self._plan.body["messages"],
                        {"role": "assistant", "content": assistant},
                        {"role": "user", "content": results},
                    ]
                    round_ += 1
                    job = await self.submit(round_)
                    first = await next_output(job.stream, job.request_id)
                    continue
            message["content"] = content
            message["usage"] = usage
            message["id"] = self.id
            self.message = message
            return

    def _use_block(self, call: dict[str, Any]) -> dict[str, Any]:
        """The ``mcp_tool_use`` block of the model's call ``call``."""
        server = self._plan.owner[call["name"]]
        return {
            "type": "mcp_tool_use",
            "id": call["id"],
            "name": call["name"],
            "server_name": server,
            "input": call["input"],
        }

    async def _call(self, call: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Run one MCP call: its ``mcp_tool_result`` block and the
        ``tool_result`` block the model reads next round."""
        server = self._plan.owner[call["name"]]
        hub: McpHub = self._request.app.state.mcp
        outcome: CallOutcome = await hub.call(server, call["name"], call["input"], origin="messages")
        text = outcome.text if outcome.ok else f"Error: {outcome.text}"
        result = {
            "type": "mcp_tool_result",
            "tool_use_id": call["id"],
            "is_error": not outcome.ok,
            "content": [{"type": "text", "text": text}],
        }
        back = {"type": "tool_result", "tool_use_id": call["id"], "content": text, "is_error": not outcome.ok}
        return result, back


def _block_frames(index: int, block: dict[str, Any]) -> bytes:
    """The start, delta and stop events of one finished content block."""
    kind = block["type"]
    frames = b""
    if kind == "text":
        start, delta = dict(block, text=""), {"type": "text_delta", "text": block["text"]}
    elif kind == "thinking":
        start, delta = dict(block, thinking=""), {"type": "thinking_delta", "thinking": block["thinking"]}
    elif kind in ("tool_use", "mcp_tool_use"):
        start = dict(block, input={})
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    else:
        start, delta = block, None
    frames += sse.json_frame(
        {"type": "content_block_start", "index": index, "content_block": start}, event="content_block_start"
    )
    if delta is not None:
        frames += sse.json_frame(
            {"type": "content_block_delta", "index": index, "delta": delta}, event="content_block_delta"
        )
    return frames + sse.json_frame({"type": "content_block_stop", "index": index}, event="content_block_stop")


async def create_mcp_message(request: Request, raw: bytes) -> Response:
    """``POST /v1/messages`` with ``mcp_servers`` (see the module docstring).

    Raises:
        APIError: 400 for a refused body or server entry; 404/503 as any
        Messages request.
    """
    data = json.loads(raw)
    rounds = McpRounds(request, plan(request.app.state.mcp, data), fmt.new_id("msg_"))
    job = await rounds.submit(0)

    async def streamed(first: RequestOutput) -> AsyncIterator[bytes]:
        start = {
            "type": "message_start",
            "message": {
                "id": rounds.id,
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": job.model,
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 0, "output_tokens": 0},
            },
        }
        yield sse.json_frame(start, event="message_start") + sse.json_frame({"type": "ping"}, event="ping")
        index = 0
        try:
            async for blocks in rounds.run(job, first):
                frames = b""
                for block in blocks:
                    frames += _block_frames(index, block)
                    index += 1
                yield frames
        except APIError as err:
            yield fmt.error_frame(fmt.anthropic_status(err.status), err.message)
            return
        if rounds.failed is not None:
            err = fmt.output_error(rounds.failed)
            yield fmt.error_frame(fmt.anthropic_status(err.status), err.message)
            return
        final = rounds.message or {}
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": final.get("stop_reason"), "stop_sequence": final.get("stop_sequence")},
            "usage": final.get("usage"),
        }
        yield sse.json_frame(delta, event="message_delta") + sse.json_frame(
            {"type": "message_stop"}, event="message_stop"
        )

    async def collect(first: RequestOutput) -> dict[str, Any] | RequestOutput:
        async for _ in rounds.run(job, first):
            pass
        return rounds.failed if rounds.failed is not None else rounds.message  # type: ignore[return-value]

    return await respond_after_first_output(
        request,
        job.stream,
        rounds.id,
        refuse=lambda output: anthropic_error_response(fmt.output_error(output)),
        streamed=streamed if data.get("stream") else None,
        stream_headers={**job.headers, REQUEST_ID_HEADER: fmt.new_id("req_")},
        collect=collect,
        answer=lambda message: _json_response(json.dumps(message).encode(), job.headers),
    )
