"""The server-side MCP tool loop of ``POST /v1/messages`` (``mcp_servers``).

The entries are bound and the body rewritten by
:mod:`gateway.anthropic_mcp_plan`. The loop (on the event loop; each round
an ordinary worker request whose :class:`~gateway.anthropic_builder.MessageBuilder`
is drained by :class:`~gateway.answer_driver.AnswerRun`): the servers' tools are offered to the model as custom tools of their own names;
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
from typing import Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import Response

from gateway import anthropic_format as fmt
from gateway import sse
from gateway.anthropic_checks import decode_messages_request, tool_set
from gateway.anthropic_mcp_plan import McpPlan, plan
from gateway.anthropic_routes import (
    REQUEST_ID_HEADER,
    _edited,
    _images,
    _Job,
    _json_response,
    anthropic_error_response,
    collect,
)
from gateway.anthropic_translate import omit_thinking, to_generate_request
from gateway.dropped_tools import dropped_headers
from gateway.error_shapes import anthropic_error_frame
from gateway.errors import APIError, worker_error
from gateway.mcp_client import CallOutcome, McpHub
from gateway.request_flow import backend_of, next_output, respond_after_first_output
from shared.protocol import RequestOutput


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

    def __init__(self, request: Request, plan_: McpPlan, message_id: str) -> None:
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
        backend = backend_of(self._request)
        model = backend.resolve(req.model)
        generate = to_generate_request(req, self.id, _images(self._request, model))
        generate, applied = await _edited(backend, model, generate, req)
        headers = dropped_headers(tool_set(req).dropped, self._request.url.path)
        stream = await backend.submit(model, generate)
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
            "content": [{"type": "text", "text": text, "citations": None}],
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

    request_id = fmt.new_id("req_")

    async def streamed(first: RequestOutput) -> AsyncIterator[bytes]:
        empty = fmt.Usage(input_tokens=0, output_tokens=0)
        message = fmt.new_message(job.applied_edits, id=rounds.id, model=job.model, content=[], usage=empty)
        start = {"type": "message_start", "message": message}
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
            yield anthropic_error_frame(err, request_id)
            return
        if rounds.failed is not None:
            yield anthropic_error_frame(worker_error(rounds.failed), request_id)
            return
        final = rounds.message or {}
        delta = fmt.message_delta(
            final.get("stop_reason"), final.get("stop_sequence"), final.get("usage"), final.get("context_management")
        )
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
        refuse=lambda output: anthropic_error_response(worker_error(output)),
        streamed=streamed if data.get("stream") else None,
        stream_headers={**job.headers, REQUEST_ID_HEADER: request_id},
        collect=collect,
        answer=lambda message: _json_response(json.dumps(message).encode(), job.headers),
    )
