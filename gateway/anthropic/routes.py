"""Starlette endpoints of the Anthropic Messages API.

``messages`` (POST /v1/messages) and ``count_tokens``
(POST /v1/messages/count_tokens). Like the OpenAI endpoints they reach the
workers only through the :class:`~gateway.core.backend.ModelBackend` in
``request.app.state.backend`` and never block the event loop. The
``anthropic-version`` and ``anthropic-beta`` headers are accepted with any
value; nothing depends on them.

Generation flow: decode and validate the body, resolve the model, submit
(always one choice), then await the first output *before* any header is
sent, so a request the worker refuses is answered with a proper status even
when ``stream`` is true. The answer is built by
:class:`~gateway.anthropic.builder.MessageBuilder` and driven by
:func:`gateway.frontend.answer_driver.answer`: a stream is sent as Anthropic SSE events
(``message_start``, ``ping``, content blocks, ``message_delta``,
``message_stop``; ``event: error`` if the request fails midway); otherwise
the same builder is drained into one ``message`` object. Whatever happens
(client gone, error, cancellation) the request stream is closed, which
aborts the request in the worker.

Before submitting, context-management edits are applied to the prompt
(:mod:`gateway.anthropic.context`; token counts come from the worker as
``count_only`` requests), and tools mlxd drops (server tools) are logged and
named in the ``x-mlxd-dropped-tools`` header of the answer
(:mod:`gateway.frontend.dropped_tools`). Images inside
tool results follow ``server.tool_result_images``.

Errors are Anthropic-shaped (:func:`gateway.frontend.error_shapes.anthropic_error_response`); every
answer a client can see carries a ``request-id`` header (``req_…``), which
the SDK exposes as ``_request_id``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from gateway.anthropic import format as fmt
from gateway.anthropic import mcp as anthropic_mcp
from gateway.anthropic.builder import MessageBuilder
from gateway.anthropic.checks import decode_count_tokens_request, decode_messages_request, tool_set
from gateway.anthropic.mcp_plan import count_body, names_mcp_servers
from gateway.anthropic.submit import (
    MessagesJob,
    builder_of,
    count_prompt,
    edited,
    json_response,
    prompt_tokens,
    submit_decoded,
    tool_result_images,
)
from gateway.anthropic.translate import to_count_request
from gateway.core.errors import APIError, worker_error
from gateway.core.ids import new_id
from gateway.frontend.answer_driver import answer
from gateway.frontend.dropped_tools import dropped_headers
from gateway.frontend.error_shapes import REQUEST_ID_HEADER, anthropic_error_response
from gateway.frontend.request_flow import backend_of, respond_after_first_output

# --- POST /v1/messages ------------------------------------------------------------------


async def messages(request: Request) -> Response:
    """``POST /v1/messages``: a ``message`` object, or an SSE stream of
    Anthropic events when ``stream`` is true. Errors are Anthropic error JSON
    with the matching status. A request with ``mcp_servers`` is answered by
    the MCP tool loop of :mod:`gateway.anthropic.mcp`."""
    try:
        body = await request.body()
        if names_mcp_servers(body):
            return await anthropic_mcp.create_mcp_message(request, body)
        job = await submit_decoded(request, decode_messages_request(body), new_id("msg_"))
    except APIError as err:
        return anthropic_error_response(err)
    request_id = new_id("req_")
    return await answer(
        request,
        job.stream,
        job.request_id,
        builder_of(job, request_id),
        streaming=job.stream_requested,
        refuse=lambda output: anthropic_error_response(worker_error(output)),
        body=lambda builder: _answer(job, builder),
        headers={**job.headers, REQUEST_ID_HEADER: request_id},
    )


def _answer(job: MessagesJob, builder: MessageBuilder) -> Response:
    """The ``message`` object answering ``job``, or a 500 when a tool
    call's arguments are not a JSON object."""
    try:
        body = builder.body()
    except APIError as err:
        return anthropic_error_response(err)
    return json_response(body, job.headers)


# --- POST /v1/messages/count_tokens ---------------------------------------------------------


async def count_tokens(request: Request) -> Response:
    """``POST /v1/messages/count_tokens``: ``{"input_tokens": N}``, the number
    of tokens the request's prompt (system, messages, tools) renders to,
    after any context-management edits; with ``context_management`` also
    ``{"context_management": {"original_input_tokens": M}}``, the count
    before the edits. ``mcp_servers`` count as the tools they offer. Errors
    as for :func:`messages`."""
    try:
        body = await request.body()
        if names_mcp_servers(body):
            body = count_body(request.app.state.mcp, body)
        req = decode_count_tokens_request(body)
        backend = backend_of(request)
        model = backend.resolve(req.model)
        original = to_count_request(req, new_id("count_"), tool_result_images(request, model))
        generate, applied = await edited(backend, model, original, req)
        before = None
        if applied:
            before = await count_prompt(backend, model, original, list(original.messages or ()))
        headers = dropped_headers(tool_set(req).dropped, request.url.path)
        stream = await backend.submit(model, generate)
    except APIError as err:
        return anthropic_error_response(err)
    return await respond_after_first_output(
        request,
        stream,
        generate.request_id,
        refuse=lambda output: anthropic_error_response(worker_error(output)),
        streamed=None,
        collect=lambda first: prompt_tokens(stream, generate.request_id, first),
        answer=lambda tokens: json_response(
            fmt.count_tokens_body(tokens, None if applied is None else before or tokens), headers
        ),
    )
