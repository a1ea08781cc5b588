"""Starlette endpoint of the OpenAI Responses API: ``POST /v1/responses``.

``create_response`` answers one stateless response: nothing is stored, so
there is no ``GET /v1/responses/{id}``, no ``previous_response_id`` and no
background mode; clients send the whole conversation as ``input`` (see
:mod:`gateway.responses.schema`). It reaches the workers only through the
:class:`~gateway.core.backend.ModelBackend` in ``request.app.state.backend``.

Flow, as for chat completions (:mod:`gateway.openai.routes`, with
:func:`gateway.frontend.answer_driver.answer` driving the
:class:`~gateway.responses.builder.ResponseBuilder`): decode and
validate, resolve the model, submit one choice, then await the first output
*before* any header is sent, so a refused request (e.g. an input longer
than the context: 400 ``context_length_exceeded`` naming ``input``) gets a
proper status even when ``stream`` is true. Errors use the OpenAI error
shape and the statuses of :func:`gateway.core.errors.worker_error`.

Without ``stream`` the same builder is drained into one ``response`` object
(status ``completed``, or ``incomplete`` when the token limit was hit); an
error after the first output is answered as an error status. With
``stream`` the answer is SSE: ``event: <type>`` frames in the order
described in :mod:`gateway.responses.builder`, ending with
``response.completed`` / ``response.incomplete``, or, when the request
fails mid-stream, with an ``error`` event (the OpenAI SDKs raise on it) and
``response.failed``. There is no ``[DONE]`` frame in this API. Whatever
happens (client gone, error, cancellation) the request stream is closed,
which aborts the request in the worker.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from gateway.core.backend import ModelBackend, RequestStream
from gateway.core.errors import APIError, worker_error
from gateway.frontend.answer_driver import answer
from gateway.frontend.dropped_tools import dropped_headers
from gateway.frontend.error_shapes import openai_error_response
from gateway.frontend.request_flow import JSON_MEDIA_TYPE, backend_of
from gateway.images.request import model_takes_images
from gateway.responses.builder import ResponseBuilder, ResponseHead
from gateway.responses.checks import decode_responses_request
from gateway.responses.format import encode, new_id
from gateway.responses.mcp_plan import wants_mcp
from gateway.responses.schema import ResponsesRequest
from gateway.responses.translate import dropped_tools, output_options, response_settings, to_generate_request
from shared.protocol import RequestOutput

PROMPT_PARAM = "input"
"""The request field a context-length error names."""

PARAMS = {"response_format": "text.format"}
"""Worker field names that this endpoint spells differently (see
:func:`gateway.core.errors.worker_error`)."""


@dataclass(frozen=True)
class _Job:
    """One admitted request: the decoded body, the worker's request stream,
    the builder of its response and the headers every answer carries."""

    request: ResponsesRequest
    stream: RequestStream
    builder: ResponseBuilder
    request_id: str
    headers: dict[str, str]


async def create_response(request: Request) -> Response:
    """``POST /v1/responses``: a ``response`` object, or an SSE stream of
    Responses events when ``stream`` is true. Errors are OpenAI error JSON
    with the matching status (see the module docstring)."""
    body = await request.body()
    try:
        from gateway.responses import mcp as responses_mcp  # imports this module

        if wants_mcp(body):
            return await responses_mcp.create_mcp_response(request, body)
        job = await _submit(request, body)
    except APIError as err:
        return openai_error_response(err)
    return await answer(
        request,
        job.stream,
        job.request_id,
        job.builder,
        streaming=bool(job.request.stream),
        refuse=lambda output: openai_error_response(error_of(output)),
        body=lambda builder: Response(encode(builder.final), media_type=JSON_MEDIA_TYPE, headers=job.headers),
        headers=job.headers,
    )


def error_of(output: RequestOutput) -> APIError:
    """The client error for an ``error``/``abort`` output of this endpoint
    (a context-length error names ``input``)."""
    return worker_error(output, PROMPT_PARAM, PARAMS)


async def _submit(request: Request, body: bytes) -> _Job:
    """Decode the body, resolve the model and submit.

    Raises:
        APIError: 400 invalid body, 404 unknown model, 503 worker not ready
        or overloaded.
    """
    return await submit_decoded(backend_of(request), decode_responses_request(body), new_id("resp"))


async def submit_decoded(backend: ModelBackend, req: ResponsesRequest, request_id: str) -> _Job:
    """Resolve the model of the decoded ``req`` and submit it as
    ``request_id`` (also the response's ``id``).

    Raises:
        APIError: 404 unknown model, 503 worker not ready or overloaded.
    """
    model = backend.resolve(req.model)
    generate = to_generate_request(req, request_id, model_takes_images(backend, model))
    stream = await backend.submit(model, generate)
    head = ResponseHead(id=request_id, created_at=int(time.time()), model=model)
    defaults = next((m.sampling_defaults for m in backend.models() if m.name == model), None)
    builder = ResponseBuilder(head, response_settings(req, defaults), options=output_options(req), error_of=error_of)
    return _Job(req, stream, builder, request_id, dropped_headers(dropped_tools(req), "/v1/responses"))
