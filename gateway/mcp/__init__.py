"""MCP servers, seen from the gateway.

Belongs here: sessions with the configured servers through the official
``mcp`` SDK (:mod:`~gateway.mcp.client`), the ``/v1/mcp/*`` routes
(:mod:`~gateway.mcp.routes`), and the one driver of server-side tool rounds
that the Responses and Anthropic front-ends adapt
(:mod:`~gateway.mcp.rounds`).

Its routes' part of the OpenAPI document: :mod:`~gateway.mcp.openapi`.

Imports: :mod:`gateway.core`, :mod:`gateway.frontend` and :mod:`shared`;
never a front-end (they plug into :mod:`~gateway.mcp.rounds` through its
adapter interface). Runs on the gateway's event loop; the SDK's own tasks
run there too.
"""
