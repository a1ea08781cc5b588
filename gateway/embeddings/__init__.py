"""The OpenAI embeddings front-end: ``POST /v1/embeddings``.

Its body shape (:mod:`~gateway.embeddings.schema`) and endpoint
(:mod:`~gateway.embeddings.routes`).

Its routes' part of the OpenAPI document: :mod:`~gateway.embeddings.openapi`.

Imports: :mod:`gateway.core`, :mod:`gateway.frontend` and :mod:`shared`;
never another front-end, the workers or the metrics. Runs on the gateway's
event loop.
"""
