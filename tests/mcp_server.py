"""An MCP server for the tests, written with the official ``mcp`` SDK.

Tools: ``add`` (arithmetic), ``lookup`` (a fixed capital-city table),
``nap`` (one second), ``fail`` (a tool error), ``hang`` (sleeps far past any test timeout) and
``crash`` (the process exits mid-call); the last three take no arguments,
so a model forced to call them always sends valid ones. Run ``python -m tests.mcp_server``
for stdio, or with ``http PORT`` for streamable HTTP on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("mlxd-test")

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
