"""The pure parts of the MCP support: argument validation, approval rules,
and the replay of MCP items and blocks sent back by a client."""

from __future__ import annotations

from gateway.anthropic.mcp_plan import replay_messages
from gateway.mcp.client import McpTool, validate_arguments
from gateway.responses.mcp_plan import Binding

ADD = McpTool(
    "calc",
    "add",
    "Add",
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]},
)
LOOKUP = McpTool("calc", "lookup", "Look up", {"type": "object"}, {"readOnlyHint": True})


def test_arguments_are_checked_against_the_input_schema():
    assert validate_arguments(ADD, {"a": 1, "b": 2}) is None
    assert "'b' is a required property" in validate_arguments(ADD, {"a": 1})
    assert validate_arguments(ADD, {"a": "one", "b": 2}).startswith("a: ")
    assert validate_arguments(ADD, [1, 2]) == "arguments must be a JSON object"
    broken = McpTool("calc", "x", "", {"type": 12})
    assert "input schema is invalid" in validate_arguments(broken, {})


def test_approval_rules():
    tools = {"add": ADD, "lookup": LOOKUP}
    assert not Binding("calc", tools, "never").needs_approval("add")
    assert Binding("calc", tools, "always").needs_approval("add")
    named = Binding("calc", tools, {"never": {"tool_names": ["lookup"]}})
    assert named.needs_approval("add") and not named.needs_approval("lookup")
    read_only = Binding("calc", tools, {"never": {"read_only": True}})
    assert read_only.needs_approval("add") and not read_only.needs_approval("lookup")


def test_anthropic_mcp_blocks_are_replayed_as_tool_turns():
    messages = [
        {"role": "user", "content": "Add"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Adding."},
                {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "add", "server_name": "calc", "input": {"a": 1}},
                {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_1", "is_error": False, "content": "2"},
                {"type": "text", "text": "It is 2."},
            ],
        },
    ]
    out = replay_messages(messages)
    assert [m["role"] for m in out] == ["user", "assistant", "user", "assistant"]
    assert out[1]["content"][1] == {"type": "tool_use", "id": "mcptoolu_1", "name": "add", "input": {"a": 1}}
    assert out[2]["content"][0]["type"] == "tool_result" and out[2]["content"][0]["tool_use_id"] == "mcptoolu_1"
    assert out[3]["content"] == [{"type": "text", "text": "It is 2."}]


def test_only_transport_failures_break_the_session():
    import asyncio

    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

    from gateway.mcp.client import McpConnection
    from shared.config import McpServerConfig

    class Session:
        """Raises the next of ``errors`` from ``call_tool``."""

        def __init__(self, errors):
            self.errors = list(errors)

        async def call_tool(self, tool, arguments):
            raise self.errors.pop(0)

    async def run():
        conn = McpConnection(McpServerConfig(name="calc", command="x"))
        conn._session = Session(
            [
                MCPError(-32010, "refused"),
                RuntimeError("Invalid structured content returned by tool add: 'x' is not of type 'integer'"),
                MCPError(REQUEST_TIMEOUT, "Request 'tools/call' timed out"),
                MCPError(CONNECTION_CLOSED, "Connection closed"),
            ]
        )
        refused = await conn.call("add", {})
        invalid = await conn.call("add", {})
        late = await conn.call("add", {})
        assert not conn._broken.is_set()
        closed = await conn.call("add", {})
        return refused, invalid, late, closed, conn._broken.is_set()

    refused, invalid, late, closed, broken = asyncio.run(run())
    assert refused.outcome == "protocol_error" and refused.code == -32010 and "refused" in refused.text
    assert invalid.outcome == "protocol_error" and invalid.code is None and "invalid result" in invalid.text
    assert late.outcome == "timeout"
    assert closed.outcome == "unavailable" and broken


def test_stdio_servers_start_off_the_callers_event_loop(monkeypatch):
    """The hub's sessions run on their own loop and thread: the stdio
    server's fork and exec never block the loop that awaits the hub (the
    gateway's), and a call awaited there is answered."""
    import asyncio
    import subprocess
    import sys
    import threading
    from pathlib import Path

    from gateway.mcp.client import McpHub
    from shared.config import McpServerConfig

    started_on = []
    original = subprocess.Popen.__init__

    def spy(self, *args, **kwargs):
        started_on.append(threading.current_thread().name)
        original(self, *args, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", spy)
    root = str(Path(__file__).resolve().parents[2])
    config = McpServerConfig(name="calc", command=sys.executable, args=["-m", "tests.mcp_server"], cwd=root)

    async def run():
        hub = McpHub([config])
        await hub.start()
        try:
            assert await hub.wait_ready(60), hub.status()
            return await hub.call("calc", "add", {"a": 2, "b": 3})
        finally:
            await hub.stop()

    outcome = asyncio.run(run())
    assert outcome.outcome == "ok" and outcome.text == "5", outcome
    assert started_on and threading.main_thread().name not in started_on, started_on
