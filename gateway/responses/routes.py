"""Starlette endpoint of the OpenAI Responses API: ``POST /v1/responses``.

``create_response`` answers one stateless response: nothing is stored, so
there is no ``GET /v1/responses/{id}``, no ``previous_response_id`` and no
background mode; clients send the whole conversation as ``input`` (see
:mod:`gateway.responses.schema`). It reaches the workers only through the
:class:`~gateway.core.backend.ModelBackend` in ``request.app.state.backend``.

Submission is :mod:`gateway.responses.submit` (shared with the MCP tool
loop of :mod:`gateway.responses.mcp`, which answers a request with MCP
tools). Flow, as for chat completions (:mod:`gateway.openai.routes`, with
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

from starlette.requests import Request
from starlette.responses import Response

from gateway.core.errors import APIError
from gateway.core.ids import new_id
from gateway.frontend.answer_driver import answer
from gateway.frontend.error_shapes import openai_error_response
from gateway.frontend.request_flow import JSON_MEDIA_TYPE, backend_of
from gateway.responses import mcp as responses_mcp
from gateway.responses.checks import decode_responses_request
from gateway.responses.format import encode
from gateway.responses.mcp_plan import has_mcp_tool
from gateway.responses.submit import error_of, submit_decoded


async def create_response(request: Request) -> Response:
    """``POST /v1/responses``: a ``response`` object, or an SSE stream of
    Responses events when ``stream`` is true. Errors are OpenAI error JSON
    with the matching status (see the module docstring)."""
    body = await request.body()
    try:
        if has_mcp_tool(body):
            return await responses_mcp.create_mcp_response(request, body)
        job = await submit_decoded(backend_of(request), decode_responses_request(body), new_id("resp_"))
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
