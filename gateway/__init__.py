"""The mlxd gateway: a Starlette app that authenticates, translates the
OpenAI, Anthropic and Ollama protocols into the wire contract, streams SSE
and NDJSON, and supervises one worker process per model. One process, one
asyncio event loop: it never imports MLX (nor :mod:`worker`) and never
blocks its loop.

The top of the package is the entry points and the composition:
:mod:`gateway.cli` (``mlxd``), :mod:`gateway.__main__`, :mod:`gateway.server`
(uvicorn and signals), :mod:`gateway.node_main` (``mlxd node``),
:mod:`gateway.app` (routes, middleware, lifespan) and
:mod:`gateway.openapi_document` (every part of the OpenAPI document, assembled
into one; each protocol package holds its own part in its ``openapi`` module).
Nothing below imports them.

The packages, each importing only those listed before it (and :mod:`shared`):

- :mod:`gateway.core`: errors, the backend interface, ids.
- :mod:`gateway.frontend`: the toolkit every protocol front-end shares.
- :mod:`gateway.images`: image parts, remote image fetching.
- :mod:`gateway.mcp`: MCP sessions, routes, the one tool-round driver.
- :mod:`gateway.hub`: models from the Hugging Face Hub (catalog, pulls,
  the local store; imports nothing of the gateway).
- :mod:`gateway.workers`: the pool behind the backend interface.
- :mod:`gateway.metrics`: ``GET /metrics``.
- the protocol front-ends :mod:`gateway.openai`, :mod:`gateway.responses`,
  :mod:`gateway.anthropic`, :mod:`gateway.ollama`, :mod:`gateway.embeddings`:
  never each other (the Responses front-end builds on OpenAI's chat pieces),
  never the workers or the metrics (the backend interface is their door).
- :mod:`gateway.openapi`: the OpenAPI document's parts no front-end owns
  (the Operations routes) and its schema views.
- :mod:`gateway.http`: the middleware and guards around the app.
- :mod:`gateway.service`: launchd (imports nothing of the gateway).

``tests/test_layering.py`` holds these rules.
"""
