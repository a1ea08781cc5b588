"""Starlette endpoints of the Anthropic Messages API.

``messages`` (POST /v1/messages) and ``count_tokens``
(POST /v1/messages/count_tokens). Like the OpenAI endpoints they reach the
workers only through the :class:`~gateway.model_backend.ModelBackend` in
``request.app.state.backend`` and never block the event loop. The
``anthropic-version`` and ``anthropic-beta`` headers are accepted with any
value; nothing depends on them.

Generation flow: decode and validate the body, resolve the model, submit
(always one choice), then await the first output *before* any header is
sent, so a request the worker refuses is answered with a proper status even
when ``stream`` is true. The answer is built by
:class:`~gateway.anthropic_builder.MessageBuilder` and driven by
:func:`gateway.answer_driver.answer`: a stream is sent as Anthropic SSE events
(``message_start``, ``ping``, content blocks, ``message_delta``,
``message_stop``; ``event: error`` if the request fails midway); otherwise
the same builder is drained into one ``message`` object. Whatever happens
(client gone, error, cancellation) the request stream is closed, which
aborts the request in the worker.

Before submitting, context-management edits are applied to the prompt
(:mod:`gateway.anthropic_context`; token counts come from the worker as
``count_only`` requests), and tools mlxd drops (server tools) are logged and
named in the ``x-mlxd-dropped-tools`` header of the answer
(:mod:`gateway.dropped_tools`). Images inside
tool results follow ``server.tool_result_images``.

Errors are Anthropic-shaped (:func:`gateway.error_shapes.anthropic_error_response`); every
answer a client can see carries a ``request-id`` header (``req_…``), which
the SDK exposes as ``_request_id``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from gateway import anthropic_format as fmt
from gateway.answer_driver import AnswerRun, answer
from gateway.anthropic_builder import MessageBuilder
from gateway.anthropic_checks import decode_count_tokens_request, decode_messages_request, tool_set
from gateway.anthropic_context import apply_edits
from gateway.anthropic_mcp_plan import count_body, wants_mcp
from gateway.anthropic_translate import context_edits, omit_thinking, to_count_request, to_generate_request
from gateway.dropped_tools import dropped_headers
from gateway.error_shapes import REQUEST_ID_HEADER, anthropic_error_response
from gateway.errors import APIError, worker_error
from gateway.model_backend import ModelBackend, RequestStream
from gateway.request_flow import (
    JSON_MEDIA_TYPE,
    backend_of,
    next_output,
    respond_after_first_output,
)
from gateway.request_images import model_takes_images
from shared.protocol import ChatMessage, GenerateRequest, RequestOutput, SamplingParams


def _json_response(body: bytes, headers: dict[str, str] | None = None) -> Response:
    """A 200 JSON answer with a fresh ``request-id`` (and ``headers``)."""
    return Response(
        body, media_type=JSON_MEDIA_TYPE, headers={**(headers or {}), REQUEST_ID_HEADER: fmt.new_id("req_")}
    )


def _images(request: Request, model: str | None = None) -> str:
    """What an image in a tool result becomes: ``vision`` (it goes to the
    model) when canonical ``model`` takes images, else
    ``server.tool_result_images`` (``placeholder`` when the app was built
    without a config)."""
    if model is not None and model_takes_images(backend_of(request), model):
        return "vision"
    config = getattr(request.app.state, "config", None)
    return "placeholder" if config is None else config.server.tool_result_images


async def _count_prompt(
    backend: ModelBackend, model: str, generate: GenerateRequest, messages: list[ChatMessage]
) -> int:
    """The prompt tokens of ``generate`` with ``messages`` instead of its own,
    counted by the worker (a ``count_only`` request).

    Raises:
        APIError: as the worker's error output says (:func:`~gateway.errors.worker_error`).
    """
    count = msgspec.structs.replace(
        generate,
        request_id=fmt.new_id("count_"),
        messages=messages,
        sampling=SamplingParams(),
        count_only=True,
        response_format=None,
        thinking_budget=None,
    )
    stream = await backend.submit(model, count)
    try:
        result = await _prompt_tokens(stream, count.request_id, await next_output(stream, count.request_id))
    finally:
        await stream.aclose()
    if isinstance(result, RequestOutput):
        raise worker_error(result)
    return result


async def _edited(
    backend: ModelBackend, model: str, generate: GenerateRequest, req: Any
) -> tuple[GenerateRequest, list[dict[str, Any]] | None]:
    """``generate`` with the request's context-management edits applied, and
    the applied edits (None when the request had no context management).

    Raises:
        APIError: when counting tokens fails.
    """
    if req.context_management is None:
        return generate, None
    messages, applied = await apply_edits(
        list(generate.messages or ()),
        context_edits(req),
        lambda edited: _count_prompt(backend, model, generate, edited),
    )
    return msgspec.structs.replace(generate, messages=messages), applied


# --- POST /v1/messages ------------------------------------------------------------------


@dataclass(frozen=True)
class _Job:
    """One admitted messages request (``generate`` is what was submitted;
    ``headers`` go on its answer; ``omit_thinking`` and ``applied_edits``
    shape it)."""

    generate: GenerateRequest
    model: str
    stream_requested: bool
    stream: RequestStream
    headers: dict[str, str] = field(default_factory=dict)
    omit_thinking: bool = False
    applied_edits: list[dict[str, Any]] | None = None

    @property
    def request_id(self) -> str:
        """The message id (also the worker's request id)."""
        return self.generate.request_id


async def messages(request: Request) -> Response:
    """``POST /v1/messages``: a ``message`` object, or an SSE stream of
    Anthropic events when ``stream`` is true. Errors are Anthropic error JSON
    with the matching status. A request with ``mcp_servers`` is answered by
    the MCP tool loop of :mod:`gateway.anthropic_mcp`."""
    from gateway import anthropic_mcp  # imports this module

    try:
        body = await request.body()
        if wants_mcp(body):
            return await anthropic_mcp.create_mcp_message(request, body)
        job = await _submit(request)
    except APIError as err:
        return anthropic_error_response(err)
    request_id = fmt.new_id("req_")
    return await answer(
        request,
        job.stream,
        job.request_id,
        _builder(job, request_id),
        streaming=job.stream_requested,
        refuse=lambda output: anthropic_error_response(worker_error(output)),
        body=lambda builder: _answer(job, builder),
        headers={**job.headers, REQUEST_ID_HEADER: request_id},
    )


async def _submit(request: Request) -> _Job:
    """Decode the body, resolve the model and submit.

    Raises:
        APIError: 400 invalid body, 404 unknown model, 503 worker not ready
        or overloaded.
    """
    req = decode_messages_request(await request.body())
    backend = backend_of(request)
    model = backend.resolve(req.model)
    generate = to_generate_request(req, fmt.new_id("msg_"), _images(request, model))
    generate, applied = await _edited(backend, model, generate, req)
    headers = dropped_headers(tool_set(req).dropped, request.url.path)
    stream = await backend.submit(model, generate)
    return _Job(generate, model, bool(req.stream), stream, headers, omit_thinking(req), applied)


def _builder(job: _Job, request_id: str | None = None) -> MessageBuilder:
    """The builder of ``job``'s message (``request_id``: the answer's ``request-id``)."""
    return MessageBuilder(job.request_id, job.model, job.omit_thinking, job.applied_edits, request_id)


async def collect(job: _Job, first: RequestOutput) -> MessageBuilder | RequestOutput:
    """Read ``job`` to its end (from its ``first`` output) into its
    message builder; return the builder, or the ``error``/``abort`` output
    that ended the request early. Does not close the request stream."""
    return await AnswerRun(_builder(job), job.stream, job.request_id).drain(first)  # type: ignore[return-value]


def _answer(job: _Job, builder: MessageBuilder) -> Response:
    """The ``message`` object answering ``job``, or a 500 when a tool
    call's arguments are not a JSON object."""
    try:
        body = builder.body()
    except APIError as err:
        return anthropic_error_response(err)
    return _json_response(body, job.headers)


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
        if wants_mcp(body):
            body = count_body(request.app.state.mcp, body)
        req = decode_count_tokens_request(body)
        backend = backend_of(request)
        model = backend.resolve(req.model)
        original = to_count_request(req, fmt.new_id("count_"), _images(request, model))
        generate, applied = await _edited(backend, model, original, req)
        before = None
        if applied:
            before = await _count_prompt(backend, model, original, list(original.messages or ()))
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
        collect=lambda first: _prompt_tokens(stream, generate.request_id, first),
        answer=lambda tokens: _json_response(
            fmt.count_tokens_body(tokens, None if applied is None else before or tokens), headers
        ),
    )


async def _prompt_tokens(stream: RequestStream, request_id: str, first: RequestOutput) -> int | RequestOutput:
    """Read to the output that ends the request; return its prompt token
    count, or that output when it ends the request in error."""
    output = first
    while output.finish_reason is None:
        output = await next_output(stream, request_id)
    return output if output.ends_request else output.prompt_tokens
