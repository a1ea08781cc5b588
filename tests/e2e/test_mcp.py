"""MCP tools of configured servers: listing, execution, the server-side
tool loop of Responses and Anthropic Messages, and the trust boundary.

A real gateway with the tiny model and two real MCP servers written with the
official SDK (``tests/mcp_server.py``): ``calc`` over stdio and ``web`` over
streamable HTTP on loopback.
"""

from __future__ import annotations

import re
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
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


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
        tmp_path_factory.mktemp("mcp-gw"), [{"name": TINY, "source": str(tiny_model_dir)}], mcp_servers=[stdio, web]
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        servers = httpx.get(f"{srv.url}/v1/mcp/tools", headers=srv.headers, timeout=10).json()["servers"]
        if all(s["connected"] for s in servers):
            break
        time.sleep(0.2)
    yield srv
    srv.stop()


def execute(srv, server: str, tool: str, arguments: dict) -> httpx.Response:
    """``POST /v1/mcp/execute``."""
    body = {"server": server, "tool": tool, "arguments": arguments}
    return httpx.post(f"{srv.url}/v1/mcp/execute", json=body, headers=srv.headers, timeout=30)


def test_listing_has_both_servers_tools_and_honours_the_allow_list(mcp_gateway):
    r = httpx.get(f"{mcp_gateway.url}/v1/mcp/tools", headers=mcp_gateway.headers, timeout=10)
    assert r.status_code == 200
    tools = {(t["server"], t["name"]): t for t in r.json()["data"]}
    assert {("calc", n) for n in ("add", "lookup", "fail", "hang", "crash")} <= tools.keys()
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
    assert execute(mcp_gateway, "web", "fail", {"reason": "x"}).status_code == 400
    r = httpx.post(f"{mcp_gateway.url}/v1/mcp/execute", json={"server": "calc"}, headers=mcp_gateway.headers)
    assert r.status_code == 400


def test_a_tool_error_is_reported_not_raised(mcp_gateway):
    r = execute(mcp_gateway, "calc", "fail", {"reason": "because"})
    assert r.status_code == 200 and r.json()["is_error"] is True


def test_a_hung_tool_ends_with_a_timeout(mcp_gateway):
    started = time.monotonic()
    r = execute(mcp_gateway, "calc", "hang", {"seconds": 1})
    assert r.status_code == 504 and r.json()["error"]["code"] == "timeout"
    assert time.monotonic() - started < 15
    assert execute(mcp_gateway, "calc", "add", {"a": 1, "b": 1}).json()["text"] == "2"


def test_a_crashed_stdio_server_is_restarted(mcp_gateway):
    r = execute(mcp_gateway, "calc", "crash", {"code": 1})
    assert r.status_code == 502
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = execute(mcp_gateway, "calc", "add", {"a": 2, "b": 2})
        if r.status_code == 200:
            break
        time.sleep(0.2)
    assert r.json()["text"] == "4"
    assert "mcp server calc: reconnecting" in mcp_gateway.log_path.read_text()


def test_audit_lines_name_the_call_but_not_its_arguments(mcp_gateway):
    assert execute(mcp_gateway, "calc", "lookup", {"country": SECRET}).status_code == 200
    time.sleep(0.2)
    log = mcp_gateway.log_path.read_text()
    lines = [line for line in log.splitlines() if "mcp call server=calc tool=lookup" in line]
    assert lines and re.search(r"duration_ms=\d+ outcome=tool_error", lines[-1])
    mlxd_lines = [line for line in log.splitlines() if "] mlxd." in line]
    assert not [line for line in mlxd_lines if SECRET in line]
