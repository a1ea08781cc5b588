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

Streaming: every round's events are passed on as they come, renumbered into
one response (one ``sequence_number`` series, one ``output_index`` series);
the function-call items of MCP calls are replaced by ``mcp_call`` items with
their ``response.mcp_call.*`` events. A failed or hung MCP call becomes a
``failed`` ``mcp_call`` item with an ``error``, never a hung request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from gateway import sse
from gateway.answer_driver import AnswerRun
from gateway.errors import APIError, bad_request
from gateway.mcp_client import CallOutcome, McpHub, McpTool
from gateway.openai_routes import error_response, output_error
from gateway.request_flow import JSON_MEDIA_TYPE, engine_of, next_output, respond_after_first_output
from gateway.responses_format import new_id
from gateway.responses_routes import PARAMS, PROMPT_PARAM, _Job, submit_decoded
from gateway.responses_schema import decode_responses_request
from shared.protocol import RequestOutput

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
_LIFECYCLE_START = ("response.created", "response.in_progress")
_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def wants_mcp(body: bytes) -> bool:
    """Whether ``body`` is a JSON object whose ``tools`` hold an ``mcp`` tool."""
    if b'"mcp"' not in body:
        return False
    try:
        data = json.loads(body)
    except ValueError:
        return False
    tools = data.get("tools") if isinstance(data, dict) else None
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
class _Plan:
    """The rewritten request and what the response echoes."""

    body: dict[str, Any]
    input: list[dict[str, Any]]
    owner: dict[str, Binding]
    echo_tools: list[Any]
    echo_choice: Any
    first_choice: Any
    bindings: dict[str, Binding] = field(default_factory=dict)
    approved: list[tuple[dict[str, Any], Binding]] = field(default_factory=list)


def plan(hub: McpHub, data: dict[str, Any]) -> _Plan:
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
    result = _Plan(body, [], owner, tools, choice, first_choice, bindings)
    result.input = _replay(data.get("input"), bindings, result)
    return result


def _replay(items: Any, bindings: dict[str, Binding], result: _Plan) -> list[dict[str, Any]]:
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
            out += _call_pair(item["id"], item["name"], item.get("arguments", "{}"), output)
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
                out += _call_pair(asked["id"], asked["name"], asked.get("arguments", "{}"), "The user declined.")
        else:
            out.append(item)
    return out


def _call_pair(call_id: str, name: str, arguments: str, output: str) -> list[dict[str, Any]]:
    """A function call and its output, as input items."""
    return [
        {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments},
        {"type": "function_call_output", "call_id": call_id, "output": output},
    ]


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

    def __init__(self, request: Request, plan_: _Plan, response_id: str, hub: McpHub) -> None:
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
            self._input[index : index + 1] = _call_pair(call["id"], call["name"], call["arguments"], _result(outcome))
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
                    self._input += _call_pair(call["call_id"], call["name"], call["arguments"], results[0])
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
        job = await submit_decoded(engine_of(self._request), req, self._id)
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
    job = await submit_decoded(engine_of(request), req, loop._id)
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
        refuse=lambda output: error_response(output_error(output, PROMPT_PARAM, PARAMS)),
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
