"""The toolkit the protocol front-ends share, one job a module.

Belongs here: how an admitted request is read and its client watched
(:mod:`~gateway.frontend.request_flow`), the one way a builder is driven into
a streamed or whole answer (:mod:`~gateway.frontend.answer_driver`), error
objects per protocol (:mod:`~gateway.frontend.error_shapes`), SSE framing
(:mod:`~gateway.frontend.sse`), bounded types and refusal wording for body
schemas (:mod:`~gateway.frontend.validation`), tool-call assembly
(:mod:`~gateway.frontend.tool_calls`), custom and dropped tools, embedding
vectors out of a worker output (:mod:`~gateway.frontend.embedding_vectors`),
the pieces each protocol's part of the OpenAPI document is built with
(:mod:`~gateway.frontend.openapi`).

Imports: :mod:`gateway.core` and :mod:`shared` only; never a front-end,
never the workers. Runs on the gateway's event loop.
"""
