"""The OpenAI Responses front-end: ``POST /v1/responses``.

Body shapes, checks (``input`` items in :mod:`~gateway.responses.input_checks`),
tools, translation, submission (:mod:`~gateway.responses.submit`), the
builder and shapes of the answer, encrypted reasoning items, and the MCP
tool loop: the request rewritten for it (:mod:`~gateway.responses.mcp_plan`)
and the Responses adapter of the one round driver
(:mod:`~gateway.responses.mcp`, driven by :mod:`gateway.mcp.rounds`).

Its routes' part of the OpenAPI document: :mod:`~gateway.responses.openapi`.

Imports: :mod:`gateway.core`, :mod:`gateway.frontend`, :mod:`gateway.images`,
:mod:`gateway.mcp`, :mod:`shared`, and the OpenAI front-end's chat pieces
(:mod:`gateway.openai`: schemas, checks, shapes it extends); no other
front-end, never the workers or the metrics. Runs on the gateway's event loop.
"""
