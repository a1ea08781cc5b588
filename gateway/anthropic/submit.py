"""Submitting an Anthropic Messages request: the one path from a decoded body
to a worker's request stream, shared by the endpoints
(:mod:`gateway.anthropic.routes`) and every round of the MCP tool loop
(:mod:`gateway.anthropic.mcp`).

:func:`submit_decoded` resolves the model, translates the body (images in
tool results as :func:`tool_result_images` says), applies the request's
context-management edits (:func:`edited`; token counts come from the worker
as ``count_only`` requests, :func:`count_prompt`) and submits it, giving a
:class:`MessagesJob`; :func:`builder_of` gives the job's answer builder and
:func:`collect` drains it. Runs on the gateway's event loop; reaches the
workers only through :class:`~gateway.core.backend.ModelBackend`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from gateway.anthropic.builder import MessageBuilder
from gateway.anthropic.checks import tool_set
from gateway.anthropic.context import apply_edits
from gateway.anthropic.schema import MessagesRequest
from gateway.anthropic.translate import context_edits, omit_thinking, to_generate_request
from gateway.core.backend import ModelBackend, RequestStream
from gateway.core.errors import worker_error
from gateway.core.ids import new_id
from gateway.frontend.answer_driver import AnswerRun
from gateway.frontend.dropped_tools import dropped_headers
from gateway.frontend.error_shapes import REQUEST_ID_HEADER
from gateway.frontend.request_flow import JSON_MEDIA_TYPE, backend_of, next_output
from gateway.images.request import model_takes_images
from shared.protocol import ChatMessage, GenerateRequest, RequestOutput, SamplingParams


@dataclass(frozen=True)
class MessagesJob:
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


def json_response(body: bytes, headers: dict[str, str] | None = None) -> Response:
    """A 200 JSON answer with a fresh ``request-id`` (and ``headers``)."""
    return Response(body, media_type=JSON_MEDIA_TYPE, headers={**(headers or {}), REQUEST_ID_HEADER: new_id("req_")})


def tool_result_images(request: Request, model: str | None = None) -> str:
    """What an image in a tool result becomes: ``vision`` (it goes to the
    model) when canonical ``model`` takes images, else
    ``server.tool_result_images`` (``placeholder`` when the app was built
    without a config)."""
    if model is not None and model_takes_images(backend_of(request), model):
        return "vision"
    config = getattr(request.app.state, "config", None)
    return "placeholder" if config is None else config.server.tool_result_images


async def count_prompt(
    backend: ModelBackend, model: str, generate: GenerateRequest, messages: list[ChatMessage]
) -> int:
    """The prompt tokens of ``generate`` with ``messages`` instead of its own,
    counted by the worker (a ``count_only`` request).

    Raises:
        APIError: as the worker's error output says (:func:`~gateway.core.errors.worker_error`).
    """
    count = msgspec.structs.replace(
        generate,
        request_id=new_id("count_"),
        messages=messages,
        sampling=SamplingParams(),
        count_only=True,
        response_format=None,
        thinking_budget=None,
    )
    stream = await backend.submit(model, count)
    try:
        result = await prompt_tokens(stream, count.request_id, await next_output(stream, count.request_id))
    finally:
        await stream.aclose()
    if isinstance(result, RequestOutput):
        raise worker_error(result)
    return result


async def prompt_tokens(stream: RequestStream, request_id: str, first: RequestOutput) -> int | RequestOutput:
    """Read to the output that ends the request; return its prompt token
    count, or that output when it ends the request in error."""
    output = first
    while output.finish_reason is None:
        output = await next_output(stream, request_id)
    return output if output.ends_request else output.prompt_tokens


async def edited(
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
        lambda edited_messages: count_prompt(backend, model, generate, edited_messages),
    )
    return msgspec.structs.replace(generate, messages=messages), applied


async def submit_decoded(request: Request, req: MessagesRequest, message_id: str) -> MessagesJob:
    """Resolve the model of the decoded ``req``, translate it, apply its
    context edits and submit it as ``message_id``.

    Raises:
        APIError: 404 unknown model, 503 worker not ready or overloaded,
        or a counting error of the context edits.
    """
    backend = backend_of(request)
    model = backend.resolve(req.model)
    generate = to_generate_request(req, message_id, tool_result_images(request, model))
    generate, applied = await edited(backend, model, generate, req)
    headers = dropped_headers(tool_set(req).dropped, request.url.path)
    stream = await backend.submit(model, generate)
    return MessagesJob(generate, model, bool(req.stream), stream, headers, omit_thinking(req), applied)


def builder_of(job: MessagesJob) -> MessageBuilder:
    """The builder of ``job``'s message."""
    return MessageBuilder(job.request_id, job.model, job.omit_thinking, job.applied_edits)


async def collect(job: MessagesJob, first: RequestOutput) -> MessageBuilder | RequestOutput:
    """Read ``job`` to its end (from its ``first`` output) into its
    message builder; return the builder, or the ``error``/``abort`` output
    that ended the request early. Does not close the request stream."""
    return await AnswerRun(builder_of(job), job.stream, job.request_id).drain(first)  # type: ignore[return-value]
