"""The OpenAI chat and completions front-end: ``/v1/chat/completions``,
``/v1/completions``, ``/v1/models``.

One module a step of a request: body shapes (:mod:`~gateway.openai.schema`),
decoding and checks (:mod:`~gateway.openai.checks`, tools in
:mod:`~gateway.openai.tool_checks`), translation into a ``GenerateRequest``
(:mod:`~gateway.openai.translate`), submission
(:mod:`~gateway.openai.submit`), the answer's builder and shapes
(:mod:`~gateway.openai.builder`, :mod:`~gateway.openai.format`,
:mod:`~gateway.openai.logprobs`), the endpoints (:mod:`~gateway.openai.routes`),
their part of the OpenAPI document (:mod:`~gateway.openai.openapi`).

Imports: :mod:`gateway.core`, :mod:`gateway.frontend`, :mod:`gateway.images`
and :mod:`shared`; never another front-end, the workers or the metrics
(the workers only through :class:`gateway.core.backend.ModelBackend`).
Runs on the gateway's event loop.
"""
