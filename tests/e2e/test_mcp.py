"""MCP tools of configured servers: listing, execution, the server-side
tool loop of Responses and Anthropic Messages, and the trust boundary.

A real gateway with the tiny model and two real MCP servers written with the
official SDK (``tests/mcp_server.py``): ``calc`` over stdio and ``web`` over
streamable HTTP on loopback.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import ROOT, TINY, free_port, start_server

SECRET = "zanzibar-7781"
"""An argument value that must never reach the logs."""


@pytest.fixture(scope="module")
def http_mcp():
    """The test MCP server over streamable HTTP on a free loopback port;
    yields its URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.mcp_server", "http", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, f"the HTTP MCP server exited with code {proc.returncode}"
            try:
                httpx.get(url, timeout=5)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "the HTTP MCP server never answered"
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


@pytest.fixture(scope="module")
def mcp_gateway(tiny_model_dir, tmp_path_factory, http_mcp):
    """A gateway with the tiny model, ``calc`` (stdio) and ``web`` (HTTP)."""
    stdio = {
        "name": "calc",
        "command": sys.executable,
        "args": ["-m", "tests.mcp_server"],
        "cwd": str(ROOT),
        "call_timeout": 3,
        "restart_backoff": 0.2,
    }
    web = {"name": "web", "url": http_mcp, "allowed_tools": ["add", "lookup"], "call_timeout": 5}
    srv = start_server(
        tmp_path_factory.mktemp("mcp-gw"),
        [{"name": TINY, "source": str(tiny_model_dir)}],
        mcp_servers=[
            stdio,
            web,
            {"name": "broken", "command": "/nonexistent/mcp-server", "restart_backoff": 0.5},
            {**stdio, "name": "serial", "max_concurrency": 1, "allowed_tools": ["nap"], "call_timeout": 30},
        ],
        mcp_max_rounds=3,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            servers = httpx.get(f"{srv.url}/v1/mcp/tools", headers=srv.headers, timeout=30).json()["servers"]
            if all(s["connected"] for s in servers if s["name"] != "broken"):
                break
            assert time.monotonic() < deadline, f"MCP servers not connected: {servers}"
            time.sleep(0.2)
        yield srv
    finally:
        srv.stop()


def execute(srv, server: str, tool: str, arguments: dict) -> httpx.Response:
    """``POST /v1/mcp/execute``."""
    body = {"server": server, "tool": tool, "arguments": arguments}
    return httpx.post(f"{srv.url}/v1/mcp/execute", json=body, headers=srv.headers, timeout=30)


def log_with(srv, pattern: str, count: int = 1, timeout: float = 60.0) -> str:
    """The gateway's log once ``pattern`` (a regular expression) matches
    ``count`` times in it: audit lines are written as calls end, so wait
    for the line rather than for a while."""
    deadline = time.monotonic() + timeout
    while True:
        log = srv.log_path.read_text()
        if len(re.findall(pattern, log)) >= count:
            return log
        assert time.monotonic() < deadline, f"no {pattern!r} in the log"
        time.sleep(0.05)


def test_listing_has_both_servers_tools_and_honours_the_allow_list(mcp_gateway):
    r = httpx.get(f"{mcp_gateway.url}/v1/mcp/tools", headers=mcp_gateway.headers, timeout=10)
    assert r.status_code == 200
    tools = {(t["server"], t["name"]): t for t in r.json()["data"]}
    assert {("calc", n) for n in ("add", "lookup", "nap", "fail", "hang", "crash")} <= tools.keys()
    assert {k for k in tools if k[0] == "web"} == {("web", "add"), ("web", "lookup")}
    schema = tools[("calc", "add")]["input_schema"]
    assert schema["type"] == "object" and set(schema["required"]) == {"a", "b"}


def test_listing_and_execute_need_the_api_key(mcp_gateway):
    assert httpx.get(f"{mcp_gateway.url}/v1/mcp/tools", timeout=10).status_code == 401
    r = httpx.post(f"{mcp_gateway.url}/v1/mcp/execute", json={"server": "calc", "tool": "add"}, timeout=10)
    assert r.status_code == 401


@pytest.mark.parametrize("server", ["calc", "web"])
def test_execute_runs_a_tool(mcp_gateway, server):
    r = execute(mcp_gateway, server, "add", {"a": 19, "b": 23})
    assert r.status_code == 200, r.text
    assert r.json()["text"] == "42" and r.json()["is_error"] is False
    r = execute(mcp_gateway, server, "lookup", {"country": "Peru"})
    assert r.json()["text"] == "Lima"


def test_execute_refuses_schema_invalid_arguments(mcp_gateway):
    r = execute(mcp_gateway, "calc", "add", {"a": "nineteen", "b": 23})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "arguments" and "a" in r.json()["error"]["message"]
    r = execute(mcp_gateway, "calc", "add", {"a": 1})
    assert r.status_code == 400 and "'b' is a required property" in r.json()["error"]["message"]


def test_execute_refuses_unknown_servers_and_tools_outside_the_allow_list(mcp_gateway):
    assert execute(mcp_gateway, "nope", "add", {"a": 1, "b": 2}).status_code == 400
    assert execute(mcp_gateway, "web", "fail", {}).status_code == 400
    r = httpx.post(
        f"{mcp_gateway.url}/v1/mcp/execute", json={"server": "calc"}, headers=mcp_gateway.headers, timeout=30
    )
    assert r.status_code == 400


def test_a_server_that_cannot_start_is_reported_and_refused(mcp_gateway):
    servers = httpx.get(f"{mcp_gateway.url}/v1/mcp/tools", headers=mcp_gateway.headers, timeout=10).json()["servers"]
    broken = next(s for s in servers if s["name"] == "broken")
    assert broken["connected"] is False and broken["error"]
    started = time.monotonic()
    r = execute(mcp_gateway, "broken", "add", {"a": 1, "b": 2})
    # refused at once, not after the 10 s a server still starting would be waited for
    assert r.status_code == 502 and time.monotonic() - started < 8


def test_the_concurrency_limit_queues_calls(mcp_gateway):
    """Four one-second naps sent at once. ``serial`` (max_concurrency 1)
    runs them one after another: the last answer comes at least four
    seconds after the first was sent, however fast the machine. ``calc``
    (max_concurrency 4) runs them together: all four answers come within
    one nap plus the calls' overheads, which get two and a half seconds,
    far more than they take even on a busy machine, and still short of the
    four seconds that queueing them would take."""
    from concurrent.futures import ThreadPoolExecutor

    naps = 4

    def span(server: str) -> float:
        """Seconds from sending the first nap until the last one's answer."""
        with ThreadPoolExecutor(naps) as pool:
            started = time.monotonic()
            results = list(pool.map(lambda _: execute(mcp_gateway, server, "nap", {}), range(naps), timeout=120))
            ended = time.monotonic()
        assert all(r.json()["text"] == "rested" for r in results), [r.text for r in results]
        return ended - started

    assert span("serial") >= naps - 0.1  # one at a time
    assert span("calc") < naps - 0.5  # all four at once


def test_a_tool_error_is_reported_not_raised(mcp_gateway):
    r = execute(mcp_gateway, "calc", "fail", {})
    assert r.status_code == 200 and r.json()["is_error"] is True


def test_a_hung_tool_ends_with_a_timeout(mcp_gateway):
    started = time.monotonic()
    r = execute(mcp_gateway, "calc", "hang", {})
    assert r.status_code == 504 and r.json()["error"]["code"] == "timeout"
    assert time.monotonic() - started < 20  # the 3 s call timeout, not the client's 30 s
    assert execute(mcp_gateway, "calc", "add", {"a": 1, "b": 1}).json()["text"] == "2"


def test_a_crashed_stdio_server_is_restarted(mcp_gateway):
    r = execute(mcp_gateway, "calc", "crash", {})
    assert r.status_code == 502
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        r = execute(mcp_gateway, "calc", "add", {"a": 2, "b": 2})
        if r.status_code == 200:
            break
        time.sleep(0.2)
    assert r.json()["text"] == "4"
    log_with(mcp_gateway, r"mcp server calc: reconnecting")


def server_pid(srv, server: str = "calc") -> str:
    """The process id of the stdio test server ``server``, waiting (up to
    90 s) for it to be connected."""
    deadline = time.monotonic() + 90
    while True:
        r = execute(srv, server, "pid", {})
        if r.status_code == 200 or time.monotonic() > deadline:
            assert r.status_code == 200, r.text
            return r.json()["text"]
        time.sleep(0.2)


def test_a_json_rpc_error_fails_the_call_but_keeps_the_session(mcp_gateway):
    from concurrent.futures import ThreadPoolExecutor

    from tests.mcp_server import REFUSED

    pid = server_pid(mcp_gateway)
    with ThreadPoolExecutor(2) as pool:
        napping = pool.submit(execute, mcp_gateway, "calc", "nap", {})  # in flight during the error
        time.sleep(0.3)  # not a synchronization: the nap may also start later; the checks hold either way
        r = execute(mcp_gateway, "calc", "refuse", {})
        assert napping.result(timeout=120).json()["text"] == "rested"
    assert r.status_code == 502, r.text
    error = r.json()["error"]
    assert error["code"] == "protocol_error" and str(REFUSED) in error["message"]
    assert "the refuse tool refused" in error["message"]
    r = execute(mcp_gateway, "calc", "picky", {"word": "now"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "protocol_error"
    assert "picky wants the word please" in r.json()["error"]["message"]
    assert execute(mcp_gateway, "calc", "picky", {"word": "please"}).json()["text"] == "thank you"
    assert execute(mcp_gateway, "calc", "add", {"a": 3, "b": 4}).json()["text"] == "7"
    assert server_pid(mcp_gateway) == pid  # not restarted
    log_with(mcp_gateway, r"mcp call server=calc tool=refuse origin=execute duration_ms=\d+ outcome=protocol_error")


def test_audit_lines_name_the_call_but_not_its_arguments(mcp_gateway):
    line = r"mcp call server=calc tool=lookup origin=execute"
    seen = len(re.findall(line, mcp_gateway.log_path.read_text()))
    assert execute(mcp_gateway, "calc", "lookup", {"country": SECRET}).status_code == 200
    log = log_with(mcp_gateway, line, count=seen + 1)
    lines = [line for line in log.splitlines() if "mcp call server=calc tool=lookup" in line]
    assert lines and re.search(r"duration_ms=\d+ outcome=tool_error", lines[-1])
    mlxd_lines = [line for line in log.splitlines() if "] mlxd." in line]
    assert not [line for line in mlxd_lines if SECRET in line]


def test_listing_is_audited(mcp_gateway):
    seen = mcp_gateway.log_path.read_text().count("mcp list servers=")
    assert httpx.get(f"{mcp_gateway.url}/v1/mcp/tools", headers=mcp_gateway.headers, timeout=10).status_code == 200
    log = log_with(mcp_gateway, r"mcp list servers=", count=seen + 1)
    lines = [line for line in log.splitlines() if "mcp list servers=" in line]
    assert lines, "no audit line for GET /v1/mcp/tools"
    match = re.search(r"mcp list servers=(\S+) tools=(\d+) duration_ms=\d+ outcome=(\w+)", lines[-1])
    assert match, lines[-1]
    assert {"calc", "web", "serial"} <= set(match[1].split(",")) and "broken" not in match[1].split(",")
    assert int(match[2]) > 0 and match[3] == "partial"  # "broken" never connects


# --- the Responses tool loop ----------------------------------------------------------------


def openai_client(srv):
    """An OpenAI SDK client for ``srv``."""
    import openai

    return openai.OpenAI(base_url=f"{srv.url}/v1", api_key=srv.api_key, max_retries=0, timeout=120)


def mcp_tool(label: str = "calc", **extra) -> dict:
    """A Responses ``mcp`` tool for ``label`` that runs calls without approval."""
    return {"type": "mcp", "server_label": label, "require_approval": "never", **extra}


def forced(name: str, label: str = "calc") -> dict:
    """A ``tool_choice`` forcing the MCP tool ``name``."""
    return {"type": "mcp", "server_label": label, "name": name}


def check_add_call(call) -> None:
    """An ``add`` call ran: its output is the sum of its arguments, or, when
    the random model's arguments were cut short by the token limit, it
    failed with an invalid-arguments protocol error."""
    try:
        args = json.loads(call.arguments)
        valid = isinstance(args.get("a"), int) and isinstance(args.get("b"), int)
    except ValueError:
        valid = False
    if valid:
        assert call.status == "completed" and call.output == str(args["a"] + args["b"]) and call.error is None
    else:
        assert call.status == "failed" and call.error.type == "mcp_protocol_error" and call.error.code == -32602


def test_responses_runs_a_forced_mcp_call(mcp_gateway):
    client = openai_client(mcp_gateway)
    response = client.responses.create(
        model=TINY,
        input="Add two numbers.",
        tools=[mcp_tool(allowed_tools=["add"])],
        tool_choice=forced("add"),
        max_output_tokens=64,
    )
    kinds = [item.type for item in response.output]
    assert kinds[0] == "mcp_list_tools" and [t.name for t in response.output[0].tools] == ["add"]
    call = response.output[1]
    assert call.type == "mcp_call" and call.name == "add" and call.server_label == "calc"
    check_add_call(call)
    assert "function_call" not in kinds
    assert response.tools[0].type == "mcp" and response.status in ("completed", "incomplete")
    assert response.usage.input_tokens > 0


def test_responses_streams_the_mcp_items(mcp_gateway):
    client = openai_client(mcp_gateway)
    events = list(
        client.responses.create(
            model=TINY,
            input="Find the capital.",
            tools=[mcp_tool(allowed_tools=["lookup"])],
            tool_choice=forced("lookup"),
            max_output_tokens=64,
            stream=True,
        )
    )
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "response.mcp_list_tools.completed" in types and "response.mcp_call.in_progress" in types
    assert "response.mcp_call.failed" in types or "response.mcp_call.completed" in types
    assert "response.function_call_arguments.delta" not in types
    final = events[-1].response
    assert [i.type for i in final.output][:2] == ["mcp_list_tools", "mcp_call"]
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [i.type for i in done] == [i.type for i in final.output]
    added = [e.output_index for e in events if e.type == "response.output_item.added"]
    assert added == list(range(len(final.output)))


def test_responses_asks_for_approval_unless_never(mcp_gateway):
    client = openai_client(mcp_gateway)
    tool = {"type": "mcp", "server_label": "calc", "allowed_tools": ["add"]}
    response = client.responses.create(
        model=TINY, input="Add.", tools=[tool], tool_choice=forced("add"), max_output_tokens=64
    )
    request = response.output[-1]
    assert request.type == "mcp_approval_request" and request.name == "add"
    assert not [i for i in response.output if i.type == "mcp_call"]
    follow = client.responses.create(
        model=TINY,
        input=[
            {"role": "user", "content": "Add."},
            request.model_dump(),
            {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True},
        ],
        tools=[tool],
        tool_choice="none",
        max_output_tokens=64,
    )
    call = next(i for i in follow.output if i.type == "mcp_call")
    assert call.approval_request_id == request.id and call.arguments == request.arguments
    check_add_call(call)


def test_responses_reports_failing_and_hung_calls_as_failed_items(mcp_gateway):
    client = openai_client(mcp_gateway)
    for name, error_type in (("fail", "mcp_tool_execution_error"), ("hang", "mcp_protocol_error")):
        started = time.monotonic()
        response = client.responses.create(
            model=TINY,
            input="Go.",
            tools=[mcp_tool(allowed_tools=[name])],
            tool_choice=forced(name),
            max_output_tokens=64,
        )
        call = next(i for i in response.output if i.type == "mcp_call")
        assert call.status == "failed" and call.error.type == error_type, call
        if name == "hang":
            assert call.error.code == -32001 and "timed out" in call.error.message
        assert time.monotonic() - started < 90  # ended by the call timeout, long before the client's 120 s


def test_responses_reports_a_json_rpc_error_as_a_failed_item(mcp_gateway):
    from tests.mcp_server import REFUSED

    pid = server_pid(mcp_gateway)
    response = openai_client(mcp_gateway).responses.create(
        model=TINY,
        input="Go.",
        tools=[mcp_tool(allowed_tools=["refuse"])],
        tool_choice=forced("refuse"),
        max_output_tokens=64,
    )
    call = next(i for i in response.output if i.type == "mcp_call")
    assert call.status == "failed" and call.error.type == "mcp_protocol_error", call
    assert call.error.code == REFUSED and "the refuse tool refused" in call.error.message
    assert server_pid(mcp_gateway) == pid


def stream_failed_call(srv, name: str) -> tuple[list, object]:
    """A streamed Responses request forcing the calc tool ``name``: its
    events and its first ``mcp_call`` item (which must have failed)."""
    events = list(
        openai_client(srv).responses.create(
            model=TINY,
            input="Go.",
            tools=[mcp_tool(allowed_tools=[name])],
            tool_choice=forced(name),
            max_output_tokens=64,
            stream=True,
        )
    )
    types = [e.type for e in events]
    assert types[-1] in ("response.completed", "response.incomplete"), types
    assert "response.mcp_call.failed" in types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    call = next(i for i in events[-1].response.output if i.type == "mcp_call")
    assert call.status == "failed" and call.error.type == "mcp_protocol_error", call
    return events, call


def test_responses_stream_ends_when_the_server_crashes_mid_call(mcp_gateway):
    pid = server_pid(mcp_gateway)
    started = time.monotonic()
    _, call = stream_failed_call(mcp_gateway, "crash")
    assert "failed" in call.error.message or "not connected" in call.error.message
    assert time.monotonic() - started < 90  # well before the client's 120 s timeout
    assert server_pid(mcp_gateway) != pid  # restarted


def test_responses_stream_ends_when_a_call_hangs(mcp_gateway):
    started = time.monotonic()
    _, call = stream_failed_call(mcp_gateway, "hang")
    assert call.error.code == -32001 and "timed out" in call.error.message
    assert time.monotonic() - started < 90  # ended by the call timeout, long before the client's 120 s
    assert execute(mcp_gateway, "calc", "add", {"a": 1, "b": 1}).json()["text"] == "2"


def test_responses_refuses_unconfigured_servers_and_urls(mcp_gateway, http_mcp):
    import openai

    client = openai_client(mcp_gateway)
    bad = [
        mcp_tool("nowhere"),
        mcp_tool("web", server_url="http://169.254.169.254/latest"),
        mcp_tool("calc", server_url=http_mcp),
        {"type": "mcp", "server_label": "x", "connector_id": "connector_gmail"},
        mcp_tool("web", headers={"Authorization": "Bearer stolen"}),
    ]
    for tool in bad:
        with pytest.raises(openai.BadRequestError) as err:
            client.responses.create(model=TINY, input="Hi", tools=[tool], max_output_tokens=64)
        assert err.value.body["param"].startswith("tools[0]")
    ok = client.responses.create(
        model=TINY,
        input="Hi",
        tools=[mcp_tool("web", server_url=http_mcp)],
        tool_choice=forced("add", "web"),
        max_output_tokens=64,
    )
    assert any(i.type == "mcp_call" and i.server_label == "web" for i in ok.output)


def test_responses_rounds_are_bounded(mcp_gateway):
    client = openai_client(mcp_gateway)
    response = client.responses.create(
        model=TINY,
        input="Keep adding.",
        tools=[mcp_tool(allowed_tools=["add"])],
        tool_choice="required",
        parallel_tool_calls=False,
        max_output_tokens=64,
    )
    calls = [i for i in response.output if i.type == "mcp_call"]
    assert len(calls) == 2, response.model_dump_json(indent=1)  # mcp_max_rounds = 3: the third round may not call tools
    assert response.output[-1].type != "function_call"


def test_responses_max_tool_calls_bounds_the_whole_response(mcp_gateway):
    client = openai_client(mcp_gateway)
    response = client.responses.create(
        model=TINY,
        input="Keep adding.",
        tools=[mcp_tool(allowed_tools=["add"])],
        tool_choice="required",
        parallel_tool_calls=False,
        max_tool_calls=1,
        max_output_tokens=64,
    )
    assert len([i for i in response.output if i.type == "mcp_call"]) == 1
    assert response.max_tool_calls == 1


def test_responses_returns_client_function_calls_beside_mcp_tools(mcp_gateway):
    client = openai_client(mcp_gateway)
    weather = {"type": "function", "name": "weather", "parameters": {"type": "object", "properties": {}}}
    response = client.responses.create(
        model=TINY,
        input="Weather?",
        tools=[mcp_tool(allowed_tools=["add"]), weather],
        tool_choice={"type": "function", "name": "weather"},
        max_output_tokens=64,
    )
    assert response.output[-1].type == "function_call" and response.output[-1].name == "weather"


# --- Anthropic mcp_servers --------------------------------------------------------------------


def anthropic_client(srv):
    """An Anthropic SDK client for ``srv``."""
    import anthropic

    return anthropic.Anthropic(base_url=srv.url, api_key=srv.api_key, max_retries=0, timeout=120)


GREEDY = {"temperature": 0}
"""The Messages calls below decode greedily: the tiny model's weights are
seeded, so a forced call's arguments are the same every run. Sampled, the
random model now and then writes arguments longer than ``max_tokens``, and
a call cut short is not a JSON object (seen once in CI as a 500)."""

CALC_SERVER = {"type": "url", "url": "stdio://calc", "name": "calc", "tool_configuration": {"allowed_tools": ["add"]}}


def check_add_pair(use, result) -> None:
    """An ``mcp_tool_use`` of ``add`` and its ``mcp_tool_result``."""
    assert use.type == "mcp_tool_use" and use.name == "add" and use.server_name == "calc"
    assert result.type == "mcp_tool_result" and result.tool_use_id == use.id
    args = use.input
    if isinstance(args.get("a"), int) and isinstance(args.get("b"), int):
        assert result.is_error is False and result.content[0].text == str(args["a"] + args["b"])
    else:
        assert result.is_error is True


def test_messages_runs_a_forced_mcp_call(mcp_gateway):
    client = anthropic_client(mcp_gateway)
    message = client.beta.messages.create(
        model=TINY,
        max_tokens=64,
        messages=[{"role": "user", "content": "Add two numbers."}],
        mcp_servers=[CALC_SERVER],
        tool_choice={"type": "tool", "name": "add"},
        betas=["mcp-client-2025-04-04"],
        extra_body=GREEDY,
    )
    kinds = [b.type for b in message.content]
    assert kinds[:2] == ["mcp_tool_use", "mcp_tool_result"], kinds
    check_add_pair(message.content[0], message.content[1])
    assert "tool_use" not in kinds and message.usage.input_tokens > 0


def test_messages_streams_the_mcp_blocks(mcp_gateway):
    client = anthropic_client(mcp_gateway)
    with client.beta.messages.stream(
        model=TINY,
        max_tokens=64,
        messages=[{"role": "user", "content": "Add two numbers."}],
        mcp_servers=[CALC_SERVER],
        tool_choice={"type": "tool", "name": "add"},
        betas=["mcp-client-2025-04-04"],
        extra_body=GREEDY,
    ) as stream:
        types = [event.type for event in stream]
        message = stream.get_final_message()
    assert types[0] == "message_start" and types[-1] == "message_stop"
    assert [b.type for b in message.content][:2] == ["mcp_tool_use", "mcp_tool_result"]
    check_add_pair(message.content[0], message.content[1])


def test_messages_refuses_unconfigured_servers(mcp_gateway, http_mcp):
    import anthropic

    client = anthropic_client(mcp_gateway)
    bad = [
        {"type": "url", "url": "https://evil.example/mcp", "name": "evil"},
        {"type": "url", "url": "http://169.254.169.254/", "name": "web"},
        {"type": "url", "url": "stdio://calc", "name": "web"},
        {"type": "url", "url": http_mcp, "name": "web", "authorization_token": "stolen"},
    ]
    for server in bad:
        with pytest.raises(anthropic.BadRequestError) as err:
            client.beta.messages.create(
                model=TINY,
                max_tokens=8,
                messages=[{"role": "user", "content": "Hi"}],
                mcp_servers=[server],
                betas=["mcp-client-2025-04-04"],
            )
        assert "mcp_servers[0]" in err.value.body["error"]["message"]
    ok = client.beta.messages.create(
        model=TINY,
        max_tokens=64,
        messages=[{"role": "user", "content": "Hi"}],
        mcp_servers=[{"type": "url", "url": http_mcp, "name": "web"}],
        tool_choice={"type": "tool", "name": "lookup"},
        betas=["mcp-client-2025-04-04"],
        extra_body=GREEDY,
    )
    assert ok.content[0].type == "mcp_tool_use" and ok.content[0].server_name == "web"


def test_messages_mcp_toolset_selects_the_servers_tools(mcp_gateway):
    """The current connector form: ``mcp_servers`` entries without
    ``tool_configuration`` and one ``mcp_toolset`` tool per server."""
    import anthropic

    client = anthropic_client(mcp_gateway)
    server = {"type": "url", "url": "stdio://calc", "name": "calc"}
    toolset = {
        "type": "mcp_toolset",
        "mcp_server_name": "calc",
        "default_config": {"enabled": False, "defer_loading": False},
        "configs": {"add": {"enabled": True}},
    }
    beta = ["mcp-client-2025-11-20"]

    def create(**kw):
        return client.beta.messages.create(
            model=TINY,
            max_tokens=64,
            messages=[{"role": "user", "content": "Add two numbers."}],
            betas=beta,
            extra_body=GREEDY,
            **kw,
        )

    message = create(mcp_servers=[server], tools=[toolset], tool_choice={"type": "tool", "name": "add"})
    kinds = [b.type for b in message.content]
    assert kinds[:2] == ["mcp_tool_use", "mcp_tool_result"], kinds
    check_add_pair(message.content[0], message.content[1])
    # a tool the toolset leaves disabled is not offered to the model
    with pytest.raises(anthropic.BadRequestError) as err:
        create(mcp_servers=[server], tools=[toolset], tool_choice={"type": "tool", "name": "pid"})
    assert "tool_choice" in err.value.body["error"]["message"]
    pinned = {"type": "mcp_toolset", "mcp_server_name": "calc", "tools": [{"name": "add", "input_schema": {}}]}
    message = create(mcp_servers=[server], tools=[pinned], tool_choice={"type": "tool", "name": "add"})
    assert message.content[0].type == "mcp_tool_use" and message.content[0].name == "add"
    bad = [
        ([server], [{**toolset, "mcp_server_name": "web"}], "tools[0].mcp_server_name"),
        ([{**server, "tool_configuration": {"enabled": True}}], [toolset], "tool_configuration"),
        ([server], [toolset, toolset], "tools[1].mcp_server_name"),
        ([server], [{**pinned, "tools": [{"name": "nope", "input_schema": {}}]}], "tools[0].tools"),
        ([server], [{**toolset, "default_config": {"enabled": "yes"}}], "tools[0].default_config.enabled"),
    ]
    for servers, tools, needle in bad:
        with pytest.raises(anthropic.BadRequestError) as err:
            create(mcp_servers=servers, tools=tools)
        assert needle in err.value.body["error"]["message"], (needle, err.value.body)


@pytest.mark.parametrize("name", ["crash", "hang", "refuse"])
def test_messages_end_with_an_error_result_when_a_call_fails(mcp_gateway, name):
    pid = server_pid(mcp_gateway)
    client = anthropic_client(mcp_gateway)
    started = time.monotonic()
    message = client.beta.messages.create(
        model=TINY,
        max_tokens=64,
        messages=[{"role": "user", "content": "Go."}],
        mcp_servers=[{**CALC_SERVER, "tool_configuration": {"allowed_tools": [name]}}],
        tool_choice={"type": "tool", "name": name},
        betas=["mcp-client-2025-04-04"],
        extra_body=GREEDY,
    )
    assert time.monotonic() - started < 90  # well before the client's 120 s timeout
    kinds = [b.type for b in message.content]
    assert kinds[:2] == ["mcp_tool_use", "mcp_tool_result"], kinds
    result = message.content[1]
    assert result.is_error is True and result.tool_use_id == message.content[0].id
    text = result.content[0].text
    expected = {"crash": "calc", "hang": "timed out", "refuse": "the refuse tool refused"}[name]
    assert expected in text, text
    assert (server_pid(mcp_gateway) != pid) is (name == "crash")


def test_loop_calls_are_audited_without_arguments(mcp_gateway):
    client = openai_client(mcp_gateway)
    seen = mcp_gateway.log_path.read_text().count("tool=lookup origin=responses")
    response = client.responses.create(
        model=TINY,
        input=f"Look up {SECRET}.",
        tools=[mcp_tool(allowed_tools=["lookup"])],
        tool_choice=forced("lookup"),
        max_output_tokens=64,
    )
    call = next(i for i in response.output if i.type == "mcp_call")
    log = log_with(mcp_gateway, r"tool=lookup origin=responses", count=seen + 1)
    assert "tool=lookup origin=responses" in log and "origin=messages" in log
    argument = json.loads(call.arguments).get("country", "") if call.arguments.endswith("}") else ""
    mlxd_lines = [line for line in log.splitlines() if "] mlxd." in line]
    assert not [line for line in mlxd_lines if SECRET in line]
    if len(argument) >= 8:
        assert not [line for line in mlxd_lines if argument in line]


# --- reload (keep last: it changes the module's gateway config) -------------------------------


def test_reload_starts_added_servers_and_relists(mcp_gateway):
    config = mcp_gateway.log_path.parent / "mlxd.toml"
    text = config.read_text()
    extra = {"name": "calc2", "command": sys.executable, "args": ["-m", "tests.mcp_server"], "cwd": str(ROOT)}
    extra["allowed_tools"] = ["lookup"]
    config.write_text(text + "[[mcp_servers]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in extra.items()))
    mcp_gateway.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 90
    names: set = set()
    while time.monotonic() < deadline:
        data = httpx.get(f"{mcp_gateway.url}/v1/mcp/tools", headers=mcp_gateway.headers, timeout=10).json()["data"]
        names = {(t["server"], t["name"]) for t in data}
        if ("calc2", "lookup") in names:
            break
        time.sleep(0.2)
    assert ("calc2", "lookup") in names and ("calc2", "add") not in names
    assert ("calc", "add") in names and ("web", "lookup") in names
    assert execute(mcp_gateway, "calc2", "lookup", {"country": "Japan"}).json()["text"] == "Tokyo"
    log_with(mcp_gateway, r"mcp server calc2 started")


def test_reload_relists_an_existing_server(mcp_gateway):
    def calc_tools() -> set:
        data = httpx.get(f"{mcp_gateway.url}/v1/mcp/tools", headers=mcp_gateway.headers, timeout=10).json()["data"]
        return {t["name"] for t in data if t["server"] == "calc"}

    pid = server_pid(mcp_gateway)
    assert execute(mcp_gateway, "calc", "grow", {}).json()["text"] == "grown"  # the server now has sprout
    assert "sprout" not in calc_tools()
    assert execute(mcp_gateway, "calc", "sprout", {}).status_code == 400  # not listed yet
    mcp_gateway.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 90
    while "sprout" not in calc_tools() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "sprout" in calc_tools() and "add" in calc_tools()
    assert execute(mcp_gateway, "calc", "sprout", {}).json()["text"] == "sprouted"
    assert server_pid(mcp_gateway) == pid  # re-listed, not restarted
