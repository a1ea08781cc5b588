"""MCP servers: client sessions, the ``/v1/mcp/*`` routes."""
