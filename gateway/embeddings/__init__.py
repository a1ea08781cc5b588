"""The OpenAI embeddings front-end: ``POST /v1/embeddings``.

Its body shape (:mod:`~gateway.embeddings.schema`) and endpoint
(:mod:`~gateway.embeddings.routes`).

Imports: :mod:`gateway.core`, :mod:`gateway.frontend` and :mod:`shared`;
never another front-end, the workers or the metrics. Runs on the gateway's
event loop.
"""
