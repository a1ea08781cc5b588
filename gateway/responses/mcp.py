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

The rewriting is :mod:`gateway.responses.mcp_plan`; each round is an
ordinary Responses request whose :class:`~gateway.responses.builder.ResponseBuilder`
is run by :class:`~gateway.frontend.answer_driver.AnswerRun`.

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

from gateway.core.errors import APIError, bad_request, worker_error
from gateway.frontend import sse
from gateway.frontend.answer_driver import AnswerRun
from gateway.frontend.error_shapes import openai_error_response
from gateway.frontend.request_flow import JSON_MEDIA_TYPE, backend_of, next_output, respond_after_first_output
from gateway.mcp.client import CallOutcome, McpHub, McpTool
from gateway.responses.checks import decode_responses_request
from gateway.responses.format import new_id
from gateway.responses.mcp_plan import Binding, McpPlan, call_pair, plan
from gateway.responses.routes import PARAMS, PROMPT_PARAM, _Job, submit_decoded
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


def _add_usage(total: dict[str, Any] | None, more: dict[str, Any] | None) -> dict[str, Any] | None:
    """Field-wise sum of two usage objects."""
    if more is None:
        return total
    if total is None:
        return json.loads(json.dumps(more))
    for key, value in more.items():
        if isinstance(value, dict):
            total[key] = _add_usage(total.get(key), value)
        elif isinstance(value, (int, float)):
            total[key] = total.get(key, 0) + value
    return total


class McpLoop:
    """One MCP request's rounds, as one stream of event dicts.

    :meth:`events` yields lists of event dicts; once exhausted, ``final`` is
    the response object, and ``failed`` the output that ended a failed round.
    """

    def __init__(self, request: Request, plan_: McpPlan, response_id: str, hub: McpHub) -> None:
        self._request = request
        self._plan = plan_
        self._id = response_id
        self._hub = hub
        self._seq = 0
        self._items: list[dict[str, Any]] = []
        self._usage: dict[str, Any] | None = None
        self._input = list(plan_.input)
        self.final: dict[str, Any] | None = None
        self.failed: RequestOutput | None = None
        self._calls_done = 0
        self._choice_echo: Any = None
        self.max_rounds = request.app.state.config.server.mcp_max_rounds

    def body(self, round_: int) -> bytes:
        """The request body of round ``round_``."""
        body = dict(self._plan.body)
        body["input"] = [i for i in self._input if i.get("type") != "_approved"] or [{"role": "user", "content": ""}]
        if round_ == 0:
            if self._plan.first_choice is not None:
                body["tool_choice"] = self._plan.first_choice
        elif round_ == self.max_rounds - 1:
            body["tool_choice"] = "none"
        elif isinstance(self._plan.echo_choice, str):
            body["tool_choice"] = self._plan.echo_choice
        limit = self._plan.body.get("max_tool_calls")
        if isinstance(limit, int) and round_ > 0:
            if self._calls_done >= limit:
                body["tool_choice"] = "none"
                body.pop("max_tool_calls")
            else:
                body["max_tool_calls"] = limit - self._calls_done
        return json.dumps(body).encode()

    async def prepare(self) -> list[dict[str, Any]]:
        """Run the calls approved in the input; their ``mcp_call`` items."""
        done = []
        for index, item in enumerate(list(self._input)):
            if item.get("type") != "_approved":
                continue
            asked = item["request"]
            binding = self._plan.owner[asked["name"]]
            outcome, call = await self._run_call(asked["name"], asked.get("arguments", "{}"), binding)
            call["approval_request_id"] = asked["id"]
            done.append(call)
            self._input[index : index + 1] = call_pair(call["id"], call["name"], call["arguments"], _result(outcome))
        return done

    def _next_seq(self, event: dict[str, Any]) -> dict[str, Any]:
        event["sequence_number"] = self._seq
        self._seq += 1
        return event

    def _patch(self, response: dict[str, Any]) -> dict[str, Any]:
        response["id"] = self._id
        response["tools"] = self._plan.echo_tools
        response["max_tool_calls"] = self._plan.body.get("max_tool_calls")
        if self._plan.echo_choice is not None:
            response["tool_choice"] = self._plan.echo_choice
        elif self._choice_echo is None:  # the first round's echo of the default
            self._choice_echo = response.get("tool_choice")
        else:
            response["tool_choice"] = self._choice_echo
        return response

    def _emit_item(self, item: dict[str, Any], done: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """``output_item.added`` for ``item`` (and ``.done`` with ``done``,
        or ``item`` itself)."""
        index = len(self._items)
        self._items.append(done or item)
        return [
            self._next_seq({"type": "response.output_item.added", "output_index": index, "item": item}),
            self._next_seq({"type": "response.output_item.done", "output_index": index, "item": done or item}),
        ]

    def _list_items(self) -> list[dict[str, Any]]:
        """The ``mcp_list_tools`` items (with their events), one per entry."""
        events: list[dict[str, Any]] = []
        labels = []
        for tool in self._plan.echo_tools:
            if isinstance(tool, dict) and tool.get("type") == "mcp":
                labels.append(tool["server_label"])
        for label in labels:
            binding = self._plan.bindings[label]
            item_id = new_id("mcpl")
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

    async def _run_call(self, name: str, arguments: str, binding: Binding) -> tuple[CallOutcome, dict[str, Any]]:
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            args = None
        outcome = (
            await self._hub.call(binding.label, name, args, origin="responses")
            if args is not None
            else CallOutcome("invalid_arguments", "the arguments are not JSON")
        )
        call = {
            "id": new_id("mcp"),
            "type": "mcp_call",
            "server_label": binding.label,
            "name": name,
            "arguments": arguments,
            "output": outcome.text if outcome.ok else None,
            "error": None if outcome.ok else _error(outcome),
            "status": "completed" if outcome.ok else "failed",
            "approval_request_id": None,
        }
        return outcome, call

    async def _call_events(
        self, name: str, arguments: str, binding: Binding, results: list[str]
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """Run one call: yield its opening events before the call starts and
        its closing events once it ended; append the text for the model to
        ``results``."""
        item_id = new_id("mcp")
        index = len(self._items)
        pending = {
            "id": item_id,
            "type": "mcp_call",
            "server_label": binding.label,
            "name": name,
            "arguments": arguments,
            "output": None,
            "error": None,
            "status": "in_progress",
            "approval_request_id": None,
        }
        events = [
            self._next_seq({"type": "response.output_item.added", "output_index": index, "item": pending}),
            self._next_seq({"type": "response.mcp_call.in_progress", "item_id": item_id, "output_index": index}),
            self._next_seq(
                {
                    "type": "response.mcp_call_arguments.done",
                    "item_id": item_id,
                    "output_index": index,
                    "arguments": arguments,
                }
            ),
        ]
        self._items.append(pending)
        yield events
        outcome, call = await self._run_call(name, arguments, binding)
        call["id"] = item_id
        self._items[index] = call
        kind = "response.mcp_call.completed" if outcome.ok else "response.mcp_call.failed"
        results.append(_result(outcome))
        yield [
            self._next_seq({"type": kind, "item_id": item_id, "output_index": index}),
            self._next_seq({"type": "response.output_item.done", "output_index": index, "item": call}),
        ]

    async def events(self, job: _Job, first: RequestOutput) -> AsyncIterator[list[dict[str, Any]]]:
        """Every event of the response, round after round."""
        prelude = await self.prepare()
        started = False
        round_ = 0
        while True:
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
                            if not started:
                                data["response"] = self._patch(data["response"])
                                out.append(self._next_seq(data))
                                if kind == "response.in_progress":
                                    started = True
                                    out += self._list_items()
                                    for call in prelude:
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
            response = terminal["response"]
            self._usage = _add_usage(self._usage, response.get("usage"))
            calls = [
                i
                for i in response.get("output", [])
                if i.get("type") == "function_call" and i.get("name") in self._plan.owner
            ]
            client_calls = [
                i
                for i in response.get("output", [])
                if i.get("type") in ("function_call", "custom_tool_call") and i.get("name") not in self._plan.owner
            ]
            stop = run.failed is not None or not calls or round_ >= self.max_rounds - 1
            out = []
            if not stop:
                for item in response.get("output", []):
                    if item.get("type") == "message":
                        text = "".join(p.get("text", "") for p in item.get("content", []))
                        self._input.append({"type": "message", "role": "assistant", "content": text})
                for call in calls:
                    binding = self._plan.owner[call["name"]]
                    if binding.needs_approval(call["name"]):
                        request = {
                            "id": new_id("mcpr"),
                            "type": "mcp_approval_request",
                            "server_label": binding.label,
                            "name": call["name"],
                            "arguments": call["arguments"],
                        }
                        out += self._emit_item(request)
                        stop = True
                        continue
                    results: list[str] = []
                    async for events in self._call_events(call["name"], call["arguments"], binding, results):
                        yield out + events
                        out = []
                    self._input += call_pair(call["call_id"], call["name"], call["arguments"], results[0])
                    self._calls_done += 1
                stop = stop or bool(client_calls)  # the client's calls end the loop, after the MCP ones ran
            if stop:
                self.failed = run.failed
                response = self._patch(response)
                response["output"] = [i for i in self._items if i]
                response["usage"] = self._usage
                self.final = response
                terminal["response"] = response
                yield out + [self._next_seq(terminal)]
                return
            if out:
                yield out
            round_ += 1
            job, first = await self._submit(round_)

    async def _submit(self, round_: int) -> tuple[_Job, RequestOutput]:
        """Submit round ``round_``; its job and first output."""
        req = decode_responses_request(self.body(round_))
        job = await submit_decoded(backend_of(self._request), req, self._id)
        return job, await next_output(job.stream, self._id)


def _listed(tool: McpTool) -> dict[str, Any]:
    """A tool as an ``mcp_list_tools`` item lists it."""
    return {
        "name": tool.name,
        "description": tool.description,
        "input_schema": tool.input_schema,
        "annotations": tool.annotations,
    }


def _result(outcome: CallOutcome) -> str:
    """The text the model reads for a call's outcome."""
    return outcome.text if outcome.ok else f"Error: {outcome.text}"


async def create_mcp_response(request: Request, raw: bytes) -> Response:
    """``POST /v1/responses`` with MCP tools (see the module docstring).

    Raises:
        APIError: 400 for a refused body or MCP entry; 404/503 as any
        Responses request.
    """
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise bad_request("The body must be a JSON object", None)
    loop = McpLoop(request, plan(request.app.state.mcp, data), new_id("resp"), request.app.state.mcp)
    req = decode_responses_request(loop.body(0))
    job = await submit_decoded(backend_of(request), req, loop._id)
    headers = job.headers

    async def streamed(first: RequestOutput) -> AsyncIterator[bytes]:
        async for events in _guard(loop.events(job, first)):
            yield b"".join(sse.json_frame(e, event=e["type"]) for e in events)

    async def collect(first: RequestOutput) -> dict[str, Any] | RequestOutput:
        async for _ in loop.events(job, first):
            pass
        return loop.final if loop.failed is None else loop.failed  # type: ignore[return-value]

    return await respond_after_first_output(
        request,
        job.stream,
        loop._id,
        refuse=lambda output: openai_error_response(worker_error(output, PROMPT_PARAM, PARAMS)),
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
