"""The Anthropic Messages front-end: ``/v1/messages`` and
``/v1/messages/count_tokens``.

Body shapes, checks, tools, context-management edits
(:mod:`~gateway.anthropic.context`), translation, submission
(:mod:`~gateway.anthropic.submit`), the builder and shapes of the answer,
and the MCP tool loop: the request rewritten for it
(:mod:`~gateway.anthropic.mcp_plan`) and the Anthropic adapter of the one
round driver (:mod:`~gateway.anthropic.mcp`, driven by :mod:`gateway.mcp.rounds`).

Its routes' part of the OpenAPI document: :mod:`~gateway.anthropic.openapi`.

Imports: :mod:`gateway.core`, :mod:`gateway.frontend`, :mod:`gateway.images`,
:mod:`gateway.mcp` and :mod:`shared`; never another front-end, the workers
or the metrics. Runs on the gateway's event loop.
"""
