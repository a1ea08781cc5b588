"""The server-side MCP tool loop of ``POST /v1/messages`` (``mcp_servers``).

The entries are bound and the body rewritten by
:mod:`gateway.anthropic.mcp_plan`; the rounds are run by the one driver
:class:`gateway.mcp.rounds.McpRounds` (its rules: tool choice per round,
when the loop ends, usage), with :class:`MessagesRounds` as the Messages
API's adapter. Each round is an ordinary worker request submitted as the
endpoint submits one (:mod:`gateway.anthropic.submit`), whose message
builder is drained. The servers' tools are offered to the model as custom
tools of their own names; the request's ``tool_choice`` applies to the
first round only (later rounds ``auto``, the last of
``server.mcp_max_rounds`` rounds ``none``). The
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

from gateway.anthropic.checks import decode_messages_request
from gateway.anthropic.mcp_plan import McpPlan, plan
from gateway.anthropic.submit import MessagesJob, collect, json_response, submit_decoded
from gateway.core.errors import APIError, worker_error
from gateway.core.ids import new_id
from gateway.frontend import sse
from gateway.frontend.error_shapes import REQUEST_ID_HEADER, anthropic_error_frame, anthropic_error_response
from gateway.frontend.request_flow import respond_after_first_output
from gateway.mcp.client import CallOutcome
from gateway.mcp.rounds import Choice, McpCall, McpRounds, RoundRead, result_text
from shared.protocol import RequestOutput


class MessagesRounds:
    """The Anthropic adapter of :class:`~gateway.mcp.rounds.McpRounds`: what
    the rounds show are finished content blocks; ``message`` is the final
    message object once the rounds end well, else ``failed`` the output
    that ended a failed round."""

    def __init__(self, request: Request, plan_: McpPlan, message_id: str) -> None:
        self._request = request
        self._plan = plan_
        self.id = message_id
        self.job: MessagesJob | None = None
        self.message: dict[str, Any] | None = None
        self.failed: RequestOutput | None = None
        self._content: list[dict[str, Any]] = []
        self._last: dict[str, Any] = {}
        self._blocks: list[dict[str, Any]] = []
        self._held: list[dict[str, Any]] = []
        self._read = RoundRead([])

    def body(self, choice: Choice) -> bytes:
        """The body of a round with tool choice ``choice``."""
        body = dict(self._plan.body)
        if choice != "client":
            body["tool_choice"] = {"type": choice}
        return json.dumps(body).encode()

    async def submit(self, round_: int, choice: Choice) -> MessagesJob:
        """Submit a round (as the API's own request path does).

        Raises:
            APIError: 400 invalid body, 404 unknown model, 503 overloaded.
        """
        self.job = await submit_decoded(self._request, decode_messages_request(self.body(choice)), self.id)
        return self.job

    async def read(self, first: RequestOutput, last: bool) -> AsyncIterator[list[dict[str, Any]]]:
        """Drain the round into its message; yield its finished blocks (the
        client's tool calls held back while MCP calls are still to run)."""
        job = self.job
        assert job is not None
        try:
            collected = await collect(job, first)
        finally:
            await job.stream.aclose()
        if isinstance(collected, RequestOutput):
            self._read = RoundRead([], failed=collected)
            return
        message = json.loads(collected.body())
        self._last = message
        self._blocks = message["content"]
        mcp = [b for b in self._blocks if b["type"] == "tool_use" and b["name"] in self._plan.owner]
        others = [b for b in self._blocks if not (b["type"] == "tool_use" and b["name"] in self._plan.owner)]
        client_calls = [b for b in others if b["type"] == "tool_use"]
        ends = not mcp or last
        shown = others if ends else [b for b in others if b["type"] != "tool_use"]
        self._held = [] if ends else client_calls
        self._read = RoundRead(
            [McpCall(b["id"], b["name"], b["input"], b["input"], self._plan.owner[b["name"]]) for b in mcp],
            client_calls=bool(client_calls),
            usage=message["usage"],
        )
        self._content += shown
        if shown:
            yield shown

    def ended(self) -> RoundRead:
        """What the round just read left."""
        return self._read

    def approval(self, call: McpCall) -> list[dict[str, Any]] | None:
        """Never: the Messages API has no approval step (None)."""
        return None

    def opened(self, call: McpCall) -> list[dict[str, Any]]:
        """The ``mcp_tool_use`` block of ``call``, sent before it runs."""
        use = {
            "type": "mcp_tool_use",
            "id": call.call_id,
            "name": call.name,
            "server_name": call.server,
            "input": call.raw,
        }
        self._content.append(use)
        return [use]

    def closed(self, call: McpCall, outcome: CallOutcome) -> list[dict[str, Any]]:
        """The ``mcp_tool_result`` block of ``call``."""
        block = {
            "type": "mcp_tool_result",
            "tool_use_id": call.call_id,
            "is_error": not outcome.ok,
            "content": [{"type": "text", "text": result_text(outcome)}],
        }
        self._content.append(block)
        return [block]

    def feed_back(self, done: list[tuple[McpCall, CallOutcome]]) -> None:
        """The model's turn and the calls' ``tool_result`` blocks, appended to
        the conversation."""
        assistant = [b for b in self._blocks if b["type"] == "tool_use" or (b["type"] == "text" and b["text"])]
        results = [
            {
                "type": "tool_result",
                "tool_use_id": call.call_id,
                "content": result_text(outcome),
                "is_error": not outcome.ok,
            }
            for call, outcome in done
        ]
        self._plan.body["messages"] = [
            *self._plan.body["messages"],
            {"role": "assistant", "content": assistant},
            {"role": "user", "content": results},
        ]

    def finish(self, usage: dict[str, Any] | None, failed: RequestOutput | None) -> list[dict[str, Any]]:
        """The client's held-back tool calls; ``message`` (or ``failed``) set."""
        if failed is not None:
            self.failed = failed
            return []
        held, self._held = self._held, []
        self._content += held
        message = self._last
        message["content"] = self._content
        message["usage"] = usage
        message["id"] = self.id
        self.message = message
        return held


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
    adapter = MessagesRounds(request, plan(request.app.state.mcp, data), new_id("msg_"))
    rounds = McpRounds(adapter, request.app.state.mcp, "messages", request.app.state.config.server.mcp_max_rounds)
    job = await rounds.start()

    async def streamed(first: RequestOutput) -> AsyncIterator[bytes]:
        start = {
            "type": "message_start",
            "message": {
                "id": adapter.id,
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
            async for blocks in rounds.run(first):
                frames = b""
                for block in blocks:
                    frames += _block_frames(index, block)
                    index += 1
                yield frames
        except APIError as err:
            yield anthropic_error_frame(err)
            return
        if adapter.failed is not None:
            yield anthropic_error_frame(worker_error(adapter.failed))
            return
        final = adapter.message or {}
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": final.get("stop_reason"), "stop_sequence": final.get("stop_sequence")},
            "usage": final.get("usage"),
        }
        yield sse.json_frame(delta, event="message_delta") + sse.json_frame(
            {"type": "message_stop"}, event="message_stop"
        )

    async def collect_all(first: RequestOutput) -> dict[str, Any] | RequestOutput:
        async for _ in rounds.run(first):
            pass
        return adapter.failed if adapter.failed is not None else adapter.message  # type: ignore[return-value]

    return await respond_after_first_output(
        request,
        job.stream,
        adapter.id,
        refuse=lambda output: anthropic_error_response(worker_error(output)),
        streamed=streamed if data.get("stream") else None,
        stream_headers={**job.headers, REQUEST_ID_HEADER: new_id("req_")},
        collect=collect_all,
        answer=lambda message: json_response(json.dumps(message).encode(), job.headers),
    )
