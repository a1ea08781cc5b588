"""The rerank front-end: ``POST /v1/rerank`` (also ``/rerank`` and ``/v2/rerank``).

Its body shape, the one rerank clients send (Cohere, Jina, vLLM:
:mod:`~gateway.rerank.schema`), and endpoint (:mod:`~gateway.rerank.routes`).

Its routes' part of the OpenAPI document: :mod:`~gateway.rerank.openapi`.

Imports: :mod:`gateway.core`, :mod:`gateway.frontend` and :mod:`shared`;
never another front-end, the workers or the metrics. Runs on the gateway's
event loop.
"""
