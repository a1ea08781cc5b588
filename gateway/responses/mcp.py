"""The server-side MCP tool loop of ``POST /v1/responses``.

A request whose ``tools`` hold ``{"type": "mcp", "server_label", ...}``
entries is answered here. Each entry must name a server of the config's
``[[mcp_servers]]`` by ``server_label`` (and, when given, that server's own
``server_url``); anything else is a 400, so a request can never make mlxd
start a command or reach a new URL. ``connector_id``, ``tunnel_id``,
``headers`` and ``authorization`` are refused: mlxd talks to the server with
the credentials of its config only.

The loop (all on the event loop, each round an ordinary worker request):

1. The body is rewritten: every MCP tool the entry allows (``allowed_tools``
   as a list or ``{"tool_names", "read_only"}``) becomes a ``function``
   tool of its own name; ``tool_choice`` ``{"type": "mcp", "server_label",
   "name"}`` becomes the function choice (without ``name``: ``required``)
   for the first round only. ``mcp_list_tools``, ``mcp_call`` and
   ``mcp_approval_request`` / ``mcp_approval_response`` input items (sent
   back from an earlier response) become calls and results; an approved
   request is run first.
2. One ``mcp_list_tools`` item per entry opens the output.
3. Each round's calls to MCP tools are run (``require_approval`` ``never``,
   or the tool listed under its ``never``) and reported as ``mcp_call``
   items, or answered with an ``mcp_approval_request`` item that ends the
   response; their results are appended as function-call outputs and the
   model runs again, at most ``server.mcp_max_rounds`` rounds (the last one
   with ``tool_choice`` ``none``); ``max_tool_calls`` bounds the calls of the
   whole response (once reached, the next round may not call tools). Calls to the client's own function tools
   end the loop and are returned as usual.

The rewriting is :mod:`gateway.responses.mcp_plan`; the rounds are run by
the one driver :class:`gateway.mcp.rounds.McpRounds` (its rules: tool
choice per round, when the loop ends, usage), with :class:`ResponsesRounds`
as the Responses API's adapter. Each round is an ordinary Responses request
submitted as the endpoint submits one (:mod:`gateway.responses.submit`),
whose :class:`~gateway.responses.builder.ResponseBuilder` is run by
:class:`~gateway.frontend.answer_driver.AnswerRun`.

Streaming: every round's events are passed on as they come, renumbered into
one response (one ``sequence_number`` series, one ``output_index`` series);
the function-call items of MCP calls are replaced by ``mcp_call`` items with
their ``response.mcp_call.*`` events. A failed or hung MCP call becomes a
``failed`` ``mcp_call`` item with an ``error``, never a hung request.
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from gateway.core.errors import APIError, bad_request
from gateway.core.ids import new_id
from gateway.frontend import sse
from gateway.frontend.answer_driver import AnswerRun
from gateway.frontend.error_shapes import openai_error_response
from gateway.frontend.request_flow import JSON_MEDIA_TYPE, backend_of, respond_after_first_output
from gateway.mcp.client import CallOutcome, McpHub, McpTool
from gateway.mcp.rounds import Choice, McpCall, McpRounds, RoundRead, json_arguments, result_text, run_call
from gateway.responses.checks import decode_responses_request
from gateway.responses.mcp_plan import McpPlan, call_pair, plan
from gateway.responses.submit import ResponsesJob, error_of, submit_decoded
from shared.protocol import RequestOutput

_LIFECYCLE_START = ("response.created", "response.in_progress")
_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def _error(outcome: CallOutcome) -> dict[str, Any]:
    """An ``mcp_call`` item's ``error`` for a failed call: the tool's error
    content, or a protocol error whose code is the server's JSON-RPC code
    when it answered one."""
    if outcome.outcome == "tool_error":
        return {"type": "mcp_tool_execution_error", "content": outcome.content}
    if outcome.code is not None:
        return {"type": "mcp_protocol_error", "code": outcome.code, "message": outcome.text}
    code = {"invalid_arguments": -32602, "unknown_tool": -32601, "timeout": -32001}.get(outcome.outcome, -32000)
    return {"type": "mcp_protocol_error", "code": code, "message": outcome.text}


def _call_item(item_id: str, call: McpCall, outcome: CallOutcome | None) -> dict[str, Any]:
    """The ``mcp_call`` item of ``call``: in progress (no ``outcome`` yet),
    completed or failed."""
    return {
        "id": item_id,
        "type": "mcp_call",
        "server_label": call.server,
        "name": call.name,
        "arguments": call.raw,
        "output": outcome.text if outcome is not None and outcome.ok else None,
        "error": _error(outcome) if outcome is not None and not outcome.ok else None,
        "status": "in_progress" if outcome is None else "completed" if outcome.ok else "failed",
        "approval_request_id": None,
    }


class ResponsesRounds:
    """The Responses adapter of :class:`~gateway.mcp.rounds.McpRounds`: what
    the rounds show are Responses stream events, renumbered into one
    response (one ``sequence_number`` series, one ``output_index``
    series). Once the rounds end, ``final`` is the response object, and
    ``failed`` the output that ended a failed round."""

    def __init__(self, request: Request, plan_: McpPlan, response_id: str, hub: McpHub) -> None:
        self._request = request
        self._plan = plan_
        self.id = response_id
        self._hub = hub
        self._seq = 0
        self._items: list[dict[str, Any]] = []
        self._input = list(plan_.input)
        self.final: dict[str, Any] | None = None
        self.failed: RequestOutput | None = None
        self._calls_done = 0
        self._choice_echo: Any = None
        self._started = False
        self._approved_run = False
        self._approved: list[dict[str, Any]] = []
        self.job: ResponsesJob | None = None
        self._terminal: dict[str, Any] = {}
        self._read = RoundRead([])

    def body(self, choice: Choice) -> bytes:
        """The request body of a round with tool choice ``choice``: ``client``
        is the request's own (an MCP tool named becomes its function),
        ``auto`` keeps a client's plain string choice (``required``) and
        ``none`` is ``none``; once ``max_tool_calls`` calls ran, the rounds
        after may call no tool."""
        body = dict(self._plan.body)
        body["input"] = [i for i in self._input if i.get("type") != "_approved"] or [{"role": "user", "content": ""}]
        if choice == "client":
            if self._plan.first_choice is not None:
                body["tool_choice"] = self._plan.first_choice
        elif choice == "none":
            body["tool_choice"] = "none"
        elif isinstance(self._plan.echo_choice, str):
            body["tool_choice"] = self._plan.echo_choice
        limit = self._plan.body.get("max_tool_calls")
        if isinstance(limit, int) and choice != "client":
            if self._calls_done >= limit:
                body["tool_choice"] = "none"
                body.pop("max_tool_calls")
            else:
                body["max_tool_calls"] = limit - self._calls_done
        return json.dumps(body).encode()

    async def submit(self, round_: int, choice: Choice) -> ResponsesJob:
        """Submit a round (as the endpoint submits a request).

        Raises:
            APIError: 400 invalid body, 404 unknown model, 503 overloaded.
        """
        req = decode_responses_request(self.body(choice))
        self.job = await submit_decoded(backend_of(self._request), req, self.id)
        return self.job

    async def _run_approved(self) -> None:
        """Run the calls approved in the input (once, when the first round is
        read); their ``mcp_call`` items are shown after the list items."""
        self._approved_run = True
        for index, item in enumerate(list(self._input)):
            if item.get("type") != "_approved":
                continue
            asked = item["request"]
            arguments = asked.get("arguments", "{}")
            call = McpCall(asked["id"], asked["name"], json_arguments(arguments), arguments, "")
            call.server = self._plan.owner[call.name].label
            outcome = await run_call(self._hub, call, "responses")
            done = dict(_call_item(new_id("mcp_"), call, outcome), approval_request_id=asked["id"])
            self._approved.append(done)
            self._input[index : index + 1] = call_pair(done["id"], call.name, arguments, result_text(outcome))

    def _next_seq(self, event: dict[str, Any]) -> dict[str, Any]:
        event["sequence_number"] = self._seq
        self._seq += 1
        return event

    def _patch(self, response: dict[str, Any]) -> dict[str, Any]:
        response["id"] = self.id
        response["tools"] = self._plan.echo_tools
        response["max_tool_calls"] = self._plan.body.get("max_tool_calls")
        if self._plan.echo_choice is not None:
            response["tool_choice"] = self._plan.echo_choice
        elif self._choice_echo is None:  # the first round's echo of the default
            self._choice_echo = response.get("tool_choice")
        else:
            response["tool_choice"] = self._choice_echo
        return response

    def _emit_item(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        """``output_item.added`` and ``.done`` for ``item``."""
        index = len(self._items)
        self._items.append(item)
        return [
            self._next_seq({"type": "response.output_item.added", "output_index": index, "item": item}),
            self._next_seq({"type": "response.output_item.done", "output_index": index, "item": item}),
        ]

    def _list_items(self) -> list[dict[str, Any]]:
        """The ``mcp_list_tools`` items (with their events), one per entry."""
        events: list[dict[str, Any]] = []
        labels = [t["server_label"] for t in self._plan.echo_tools if isinstance(t, dict) and t.get("type") == "mcp"]
        for label in labels:
            binding = self._plan.bindings[label]
            item_id = new_id("mcpl_")
            item = {"id": item_id, "type": "mcp_list_tools", "server_label": label, "tools": []}
            full = dict(item, tools=[_listed(t) for t in binding.tools.values()], error=binding.error)
            index = len(self._items)
            self._items.append(full)
            events += [
                self._next_seq({"type": "response.output_item.added", "output_index": index, "item": item}),
                self._next_seq(
                    {"type": "response.mcp_list_tools.in_progress", "item_id": item_id, "output_index": index}
                ),
                self._next_seq(
                    {"type": "response.mcp_list_tools.completed", "item_id": item_id, "output_index": index}
                ),
                self._next_seq({"type": "response.output_item.done", "output_index": index, "item": full}),
            ]
        return events

    async def read(self, first: RequestOutput, last: bool) -> AsyncIterator[list[dict[str, Any]]]:
        """Pass the round's events on as they come: the lifecycle's start
        once (then the list items and any approved calls), the function-call
        items of MCP calls hidden, indexes renumbered; the terminal event is
        kept for :meth:`finish`."""
        job = self.job
        assert job is not None
        if not self._approved_run:
            await self._run_approved()
        run = AnswerRun(job.builder, job.stream, job.request_id)
        index_map: dict[int, int] = {}
        hidden: set[str] = set()
        terminal: dict[str, Any] | None = None
        try:
            async for batch in run.batches(first):
                out: list[dict[str, Any]] = []
                for event in batch:
                    data = msgspec.to_builtins(event)
                    kind = data["type"]
                    if kind in _LIFECYCLE_START:
                        if not self._started:
                            data["response"] = self._patch(data["response"])
                            out.append(self._next_seq(data))
                            if kind == "response.in_progress":
                                self._started = True
                                out += self._list_items()
                                for call in self._approved:
                                    out += self._emit_item(call)
                        continue
                    if kind in _TERMINAL:
                        terminal = data
                        continue
                    item = data.get("item")
                    if (
                        isinstance(item, dict)
                        and item.get("type") == "function_call"
                        and item.get("name") in self._plan.owner
                    ):
                        hidden.add(item["id"])
                        continue
                    if data.get("item_id") in hidden:
                        continue
                    if "output_index" in data:
                        local = data["output_index"]
                        if local not in index_map:
                            index_map[local] = len(self._items)
                            self._items.append(item or {})
                        data["output_index"] = index_map[local]
                        if kind == "response.output_item.done":
                            self._items[index_map[local]] = item
                    out.append(self._next_seq(data))
                if out:
                    yield out
        finally:
            await job.stream.aclose()
        assert terminal is not None
        self._terminal = terminal
        output = terminal["response"].get("output", [])
        owner = self._plan.owner
        self._read = RoundRead(
            [
                McpCall(i["call_id"], i["name"], json_arguments(i["arguments"]), i["arguments"], owner[i["name"]].label)
                for i in output
                if i.get("type") == "function_call" and i.get("name") in owner
            ],
            client_calls=any(
                i.get("type") in ("function_call", "custom_tool_call") and i.get("name") not in owner for i in output
            ),
            usage=terminal["response"].get("usage"),
            failed=run.failed,
        )

    def ended(self) -> RoundRead:
        """What the round just read left."""
        return self._read

    def approval(self, call: McpCall) -> list[dict[str, Any]] | None:
        """An ``mcp_approval_request`` item when ``call``'s server requires
        approval for it, else None."""
        if not self._plan.owner[call.name].needs_approval(call.name):
            return None
        request = {
            "id": new_id("mcpr_"),
            "type": "mcp_approval_request",
            "server_label": call.server,
            "name": call.name,
            "arguments": call.raw,
        }
        return self._emit_item(request)

    def opened(self, call: McpCall) -> list[dict[str, Any]]:
        """The in-progress ``mcp_call`` item of ``call`` and its events."""
        item_id = new_id("mcp_")
        index = len(self._items)
        call.shown = (item_id, index)
        self._items.append(_call_item(item_id, call, None))
        return [
            self._next_seq({"type": "response.output_item.added", "output_index": index, "item": self._items[index]}),
            self._next_seq({"type": "response.mcp_call.in_progress", "item_id": item_id, "output_index": index}),
            self._next_seq(
                {
                    "type": "response.mcp_call_arguments.done",
                    "item_id": item_id,
                    "output_index": index,
                    "arguments": call.raw,
                }
            ),
        ]

    def closed(self, call: McpCall, outcome: CallOutcome) -> list[dict[str, Any]]:
        """The finished ``mcp_call`` item of ``call`` and its events."""
        item_id, index = call.shown
        item = _call_item(item_id, call, outcome)
        self._items[index] = item
        kind = "response.mcp_call.completed" if outcome.ok else "response.mcp_call.failed"
        return [
            self._next_seq({"type": kind, "item_id": item_id, "output_index": index}),
            self._next_seq({"type": "response.output_item.done", "output_index": index, "item": item}),
        ]

    def feed_back(self, done: list[tuple[McpCall, CallOutcome]]) -> None:
        """The round's messages and each call with its result, appended to
        the input; the calls count against ``max_tool_calls``."""
        for item in self._terminal["response"].get("output", []):
            if item.get("type") == "message":
                text = "".join(p.get("text", "") for p in item.get("content", []))
                self._input.append({"type": "message", "role": "assistant", "content": text})
        for call, outcome in done:
            self._input += call_pair(call.call_id, call.name, call.raw, result_text(outcome))
            self._calls_done += 1

    def finish(self, usage: dict[str, Any] | None, failed: RequestOutput | None) -> list[dict[str, Any]]:
        """The terminal event of the whole response (``final`` set)."""
        self.failed = failed
        response = self._patch(self._terminal["response"])
        response["output"] = [i for i in self._items if i]
        response["usage"] = usage
        self.final = response
        self._terminal["response"] = response
        return [self._next_seq(self._terminal)]


def _listed(tool: McpTool) -> dict[str, Any]:
    """A tool as an ``mcp_list_tools`` item lists it."""
    return {
        "name": tool.name,
        "description": tool.description,
        "input_schema": tool.input_schema,
        "annotations": tool.annotations,
    }


async def create_mcp_response(request: Request, raw: bytes) -> Response:
    """``POST /v1/responses`` with MCP tools (see the module docstring).

    Raises:
        APIError: 400 for a refused body or MCP entry; 404/503 as any
        Responses request.
    """
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise bad_request("The body must be a JSON object", None)
    hub = request.app.state.mcp
    adapter = ResponsesRounds(request, plan(hub, data), new_id("resp_"), hub)
    rounds = McpRounds(adapter, hub, "responses", request.app.state.config.server.mcp_max_rounds)
    job = await rounds.start()
    headers = job.headers

    async def streamed(first: RequestOutput) -> AsyncIterator[bytes]:
        async for events in _guard(rounds.run(first)):
            yield b"".join(sse.json_frame(e, event=e["type"]) for e in events)

    async def collect(first: RequestOutput) -> dict[str, Any] | RequestOutput:
        async for _ in rounds.run(first):
            pass
        return adapter.final if adapter.failed is None else adapter.failed  # type: ignore[return-value]

    return await respond_after_first_output(
        request,
        job.stream,
        adapter.id,
        refuse=lambda output: openai_error_response(error_of(output)),
        streamed=streamed if data.get("stream") else None,
        collect=collect,
        answer=lambda final: Response(msgspec.json.encode(final), media_type=JSON_MEDIA_TYPE, headers=headers),
        stream_headers=headers,
    )


async def _guard(events: AsyncIterator[list[dict[str, Any]]]) -> AsyncIterator[list[dict[str, Any]]]:
    """``events``, ending with an ``error`` event when a later round cannot
    be submitted (e.g. the worker is overloaded)."""
    try:
        async for batch in events:
            yield batch
    except APIError as err:
        yield [{"type": "error", "code": err.code, "message": err.message, "param": err.param, "sequence_number": 0}]
