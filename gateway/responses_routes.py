"""Starlette endpoint of the OpenAI Responses API: ``POST /v1/responses``.

``create_response`` answers one stateless response: nothing is stored, so
there is no ``GET /v1/responses/{id}``, no ``previous_response_id`` and no
background mode; clients send the whole conversation as ``input`` (see
:mod:`gateway.responses_schema`). It reaches the workers only through the
:class:`~gateway.engine_api.Engine` in ``request.app.state.engine``.

Flow, as for chat completions (:mod:`gateway.openai_routes`): decode and
validate, resolve the model, submit one choice, then await the first output
*before* any header is sent, so a refused request (e.g. an input longer
than the context: 400 ``context_length_exceeded`` naming ``input``) gets a
proper status even when ``stream`` is true. Errors use the OpenAI error
shape and the statuses of :func:`gateway.openai_routes.output_error`.

Without ``stream`` the outputs are collected into one ``response`` object
(status ``completed``, or ``incomplete`` when the token limit was hit); an
error after the first output is answered as an error status. With
``stream`` the answer is SSE: ``event: <type>`` frames in the order
described in :mod:`gateway.responses_format`, ending with
``response.completed`` / ``response.incomplete``, or, when the request
fails mid-stream, with an ``error`` event (the OpenAI SDKs raise on it) and
``response.failed``. There is no ``[DONE]`` frame in this API. Whatever
happens (client gone, error, cancellation) the request stream is closed,
which aborts the request in the worker.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response

from gateway import sse
from gateway.engine_api import Engine, RequestStream
from gateway.errors import APIError
from gateway.openai_format import UsageTally
from gateway.openai_routes import (
    _DISCONNECTED,
    CLIENT_CLOSED_STATUS,
    JSON_MEDIA_TYPE,
    _ends_request,
    _next_output,
    _until_disconnect,
    error_response,
    output_error,
)
from gateway.responses_format import (
    Event,
    FinishReason,
    ResponseBuilder,
    ResponseHead,
    encode,
    frames,
    new_id,
)
from gateway.responses_schema import (
    ResponsesRequest,
    decode_responses_request,
    response_settings,
    to_generate_request,
)
from shared.protocol import RequestOutput

log = logging.getLogger("mlxd.gateway.responses")

PROMPT_PARAM = "input"
"""The request field a context-length error names."""

_FINISHES = ("stop", "length", "tool_calls")
"""Finish reasons that end the (single) choice successfully."""


@dataclass(frozen=True)
class _Job:
    """One admitted request: the decoded body, the worker's request stream
    and the builder of its response."""

    request: ResponsesRequest
    stream: RequestStream
    builder: ResponseBuilder
    request_id: str


def _engine(request: Request) -> Engine:
    """The Engine the app was built with."""
    return request.app.state.engine


async def create_response(request: Request) -> Response:
    """``POST /v1/responses``: a ``response`` object, or an SSE stream of
    Responses events when ``stream`` is true. Errors are OpenAI error JSON
    with the matching status (see the module docstring)."""
    try:
        job = await _submit(request)
    except APIError as err:
        return error_response(err)
    handed_off = False
    try:
        first = await _until_disconnect(request.receive, _next_output(job.stream, job.request_id))
        if first is _DISCONNECTED:
            return Response(status_code=CLIENT_CLOSED_STATUS)
        if _ends_request(first):
            return error_response(output_error(first, PROMPT_PARAM))
        if job.request.stream:
            response = sse.SSEResponse(_stream_frames(job, first), on_close=job.stream.aclose)
            handed_off = True
            return response
        return await _complete(request, job, first)
    finally:
        if not handed_off:
            await job.stream.aclose()


async def _submit(request: Request) -> _Job:
    """Decode the body, resolve the model and submit.

    Raises:
        APIError: 400 invalid body, 404 unknown model, 503 worker not ready
        or overloaded.
    """
    req = decode_responses_request(await request.body())
    engine = _engine(request)
    model = engine.resolve(req.model)
    request_id = new_id("resp")
    generate = to_generate_request(req, request_id)
    stream = await engine.submit(model, generate)
    head = ResponseHead(id=request_id, created_at=int(time.time()), model=model)
    return _Job(req, stream, ResponseBuilder(head, response_settings(req)), request_id)


class _Run:
    """Feeds one request's outputs to its response builder.

    :meth:`events` yields the stream events batch by batch; once it is
    exhausted the builder's ``final`` object is set and :attr:`error` holds
    the client error if the request failed.
    """

    def __init__(self, job: _Job) -> None:
        self._job = job
        self._tally = UsageTally()
        self.error: APIError | None = None

    async def events(self, first: RequestOutput) -> AsyncIterator[list[Event]]:
        """Yield the events of the whole response, starting with
        ``response.created``; stops after the terminal event."""
        builder = self._job.builder
        pending = builder.start()
        output = first
        while True:
            if _ends_request(output):
                yield pending + self._fail(output)
                return
            if output.index != 0:
                log.error("request %s: output for choice %d ignored", self._job.request_id, output.index)
            else:
                self._tally.add(output)
                pending += builder.add(output)
                if output.finish_reason in _FINISHES:
                    reason: FinishReason = output.finish_reason  # type: ignore[assignment]
                    yield pending + builder.finish(reason, self._tally.usage())
                    return
            if pending:
                yield pending
                pending = []
            output = await _next_output(self._job.stream, self._job.request_id)

    def _fail(self, last: RequestOutput) -> list[Event]:
        """The events ending the response with the error of ``last`` (after
        any content ``last`` still carries)."""
        self.error = err = output_error(last, PROMPT_PARAM)
        builder = self._job.builder
        events = builder.add(last) if last.index == 0 else []
        code = err.code or last.error_kind or "internal_error"
        return events + builder.fail(err.message, code, err.param, err.status, self._tally.usage())


# --- non-streaming ------------------------------------------------------------------------


async def _complete(request: Request, job: _Job, first: RequestOutput) -> Response:
    """Collect the response and answer it as one JSON object (or an error).

    Returns a 499 placeholder if the client disconnects meanwhile (the caller
    then closes the stream, aborting the request).
    """
    run = _Run(job)
    result = await _until_disconnect(request.receive, _drain(run, first))
    if result is _DISCONNECTED:
        return Response(status_code=CLIENT_CLOSED_STATUS)
    if run.error is not None:
        return error_response(run.error)
    return Response(encode(job.builder.final), media_type=JSON_MEDIA_TYPE)


async def _drain(run: _Run, first: RequestOutput) -> bool:
    """Run the request to its end, discarding the stream events."""
    async for _ in run.events(first):
        pass
    return True


# --- streaming ------------------------------------------------------------------------------


async def _stream_frames(job: _Job, first: RequestOutput) -> AsyncIterator[bytes]:
    """Yield the SSE frames of one streamed response. Closes the request
    stream in ``finally``, so a disconnect (which cancels or closes this
    generator) aborts the request in the worker."""
    try:
        async for events in _Run(job).events(first):
            yield frames(events)
    finally:
        await job.stream.aclose()
