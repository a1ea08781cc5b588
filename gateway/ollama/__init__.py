"""The Ollama-compatible front-end: ``/api/...`` and ``/``.

Body shapes, decoding and translation, the NDJSON reply builder, the
endpoints and model listings (what a model's files say comes through
:meth:`gateway.core.backend.ModelBackend.model_files`).

Its routes' part of the OpenAPI document: :mod:`~gateway.ollama.openapi`.

Imports: :mod:`gateway.core`, :mod:`gateway.frontend`, :mod:`gateway.images`
and :mod:`shared`; never another front-end, the workers or the metrics.
Runs on the gateway's event loop.
"""
