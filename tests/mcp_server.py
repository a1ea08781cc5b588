"""An MCP server for the tests, written with the official ``mcp`` SDK.

Tools: ``add`` (arithmetic), ``lookup`` (a fixed capital-city table),
``nap`` (one second), ``fail`` (a tool error), ``refuse`` (a JSON-RPC error
reply, code :data:`REFUSED`), ``hang`` (sleeps far past any test timeout) and
``crash`` (the process exits mid-call); the last four take no arguments,
so a model forced to call them always sends valid ones. ``picky`` answers a
JSON-RPC invalid-params error unless its ``word`` is ``please``; ``pid``
returns the server's process id (a restart changes it); ``grow`` adds the
tool ``sprout`` to the server's tool list (a client sees it once it lists
the tools again). Run ``python -m tests.mcp_server``
for stdio, or with ``http PORT`` for streamable HTTP on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

server = MCPServer("mlxd-test")

REFUSED = -32010
"""The JSON-RPC error code ``refuse`` answers."""

CAPITALS = {"france": "Paris", "japan": "Tokyo", "peru": "Lima"}


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers and return the sum."""
    return str(a + b)


@server.tool()
def lookup(country: str) -> str:
    """Return the capital city of a country."""
    capital = CAPITALS.get(country.strip().lower())
    if capital is None:
        raise ValueError("unknown country")
    return capital


@server.tool()
def fail() -> str:
    """Always fails with a tool error."""
    raise RuntimeError("the fail tool failed")


@server.tool()
def refuse() -> str:
    """Always answers a JSON-RPC error instead of a result."""
    raise MCPError(code=REFUSED, message="the refuse tool refused")


@server.tool()
def picky(word: str) -> str:
    """Accepts only the word please."""
    if word != "please":
        raise MCPError(code=INVALID_PARAMS, message="picky wants the word please")
    return "thank you"


@server.tool()
def pid() -> str:
    """Return this server's process id."""
    return str(os.getpid())


def sprout() -> str:
    """A tool that exists only after grow ran."""
    return "sprouted"


@server.tool()
def grow() -> str:
    """Add the tool sprout to this server's tool list."""
    if "sprout" not in {t.name for t in server._tool_manager.list_tools()}:
        server.add_tool(sprout)
    return "grown"


@server.tool()
async def hang() -> str:
    """Sleeps for a long time."""
    await asyncio.sleep(3600)
    return "woke"


@server.tool()
async def nap() -> str:
    """Sleeps one second."""
    await asyncio.sleep(1.0)
    return "rested"


@server.tool()
def crash() -> str:
    """Ends the server process abruptly."""
    os._exit(3)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
