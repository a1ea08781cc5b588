"""Starlette endpoints of the Anthropic Messages API.

``messages`` (POST /v1/messages) and ``count_tokens``
(POST /v1/messages/count_tokens). Like the OpenAI endpoints they reach the
workers only through the :class:`~gateway.engine_api.Engine` in
``request.app.state.engine`` and never block the event loop. The
``anthropic-version`` and ``anthropic-beta`` headers are accepted with any
value; nothing depends on them.

Generation flow: decode and validate the body, resolve the model, submit
(always one choice), then await the first output *before* any header is
sent, so a request the worker refuses is answered with a proper status even
when ``stream`` is true. After that a stream is sent as Anthropic SSE events
(``message_start``, ``ping``, content blocks, ``message_delta``,
``message_stop``; ``event: error`` if the request fails midway); otherwise
the outputs are collected into one ``message`` object. Whatever happens
(client gone, error, cancellation) the request stream is closed, which
aborts the request in the worker.

Errors are Anthropic-shaped (see :func:`anthropic_error_response`); every
answer a client can see carries a ``request-id`` header (``req_…``), which
the SDK exposes as ``_request_id``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive

from gateway import anthropic_format as fmt
from gateway import sse
from gateway.anthropic_schema import (
    decode_count_tokens_request,
    decode_messages_request,
    to_count_request,
    to_generate_request,
)
from gateway.engine_api import Engine, RequestStream
from gateway.errors import APIError
from shared.protocol import GenerateRequest, RequestOutput

log = logging.getLogger("mlxd.gateway.anthropic")

CLIENT_CLOSED_STATUS = 499
"""Status recorded (never seen by anyone) when the client left before the
response started."""

JSON_MEDIA_TYPE = "application/json"
"""Content type of every non-streamed answer."""

REQUEST_ID_HEADER = "request-id"
"""The header carrying the ``req_…`` id of every answer."""


def anthropic_error_response(err: APIError) -> Response:
    """Return the Anthropic-shaped JSON response for ``err``.

    The status is mapped by :func:`~gateway.anthropic_format.anthropic_status`
    (503 becomes 529); the body is ``{"type": "error", "error": {"type",
    "message"}, "request_id": "req_…"}`` with the type for that status;
    ``Retry-After`` is kept, and a 529 always has one. Usable for any
    failure on a ``/v1/messages`` path (auth, body limit, routing).
    """
    status = fmt.anthropic_status(err.status)
    request_id = fmt.new_id("req_")
    headers = err.headers()
    if status == fmt.OVERLOADED_STATUS:
        headers.setdefault("Retry-After", str(fmt.OVERLOADED_RETRY_AFTER))
    headers[REQUEST_ID_HEADER] = request_id
    body = fmt.error_body(status, err.message, request_id)
    return Response(body, status_code=status, media_type=JSON_MEDIA_TYPE, headers=headers)


def _json_response(body: bytes) -> Response:
    """A 200 JSON answer with a fresh ``request-id``."""
    return Response(body, media_type=JSON_MEDIA_TYPE, headers={REQUEST_ID_HEADER: fmt.new_id("req_")})


# --- reading a request stream ---------------------------------------------------------


def _lost_output(request_id: str) -> RequestOutput:
    """A terminal error standing in for one the stream failed to deliver."""
    return RequestOutput(
        request_id=request_id,
        finish_reason="error",
        error="The request ended without a result",
        error_kind="unavailable",
    )


async def _next_output(stream: RequestStream, request_id: str) -> RequestOutput:
    """Return the next output; if the stream ended before the request did
    (a broken Engine promise), return a terminal ``unavailable`` error."""
    try:
        return await stream.__anext__()
    except StopAsyncIteration:
        log.error("request %s: stream ended before the request finished", request_id)
        return _lost_output(request_id)


def _ends_request(output: RequestOutput) -> bool:
    """Whether ``output`` ends the request with an error or abort."""
    return output.finish_reason in fmt.ENDS_REQUEST


def _is_final(output: RequestOutput) -> bool:
    """Whether ``output`` is the single choice's successful last output."""
    return output.finish_reason in fmt.FINAL_REASONS


def _ours(output: RequestOutput, request_id: str) -> bool:
    """Whether ``output`` belongs to choice 0 (the only one); logs others,
    which the caller ignores."""
    if output.index == 0:
        return True
    log.error("request %s: output for choice %d of 1 ignored", request_id, output.index)
    return False


# --- client disconnects ---------------------------------------------------------------

_DISCONNECTED: Any = object()


async def _wait_disconnect(receive: Receive) -> None:
    """Return once the client has disconnected (body already consumed)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _until_disconnect(receive: Receive, work: Awaitable[Any]) -> Any:
    """Run ``work``; return its result, or ``_DISCONNECTED`` (with ``work``
    cancelled) if the client disconnects first. Exceptions of ``work``
    propagate; both helper tasks are gone when this returns."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_disconnect(receive))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
        return task.result() if task.done() else _DISCONNECTED
    finally:
        pending = [t for t in (task, watcher) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending)


# --- POST /v1/messages ------------------------------------------------------------------


@dataclass(frozen=True)
class _Job:
    """One admitted messages request (``generate`` is what was submitted)."""

    generate: GenerateRequest
    model: str
    stream_requested: bool
    stream: RequestStream

    @property
    def request_id(self) -> str:
        """The message id (also the worker's request id)."""
        return self.generate.request_id


def _engine(request: Request) -> Engine:
    """The Engine the app was built with."""
    return request.app.state.engine


async def messages(request: Request) -> Response:
    """``POST /v1/messages``: a ``message`` object, or an SSE stream of
    Anthropic events when ``stream`` is true. Errors are Anthropic error JSON
    with the matching status."""
    try:
        job = await _submit(request)
    except APIError as err:
        return anthropic_error_response(err)
    handed_off = False
    try:
        first = await _until_disconnect(request.receive, _next_output(job.stream, job.request_id))
        if first is _DISCONNECTED:
            return Response(status_code=CLIENT_CLOSED_STATUS)
        if _ends_request(first):
            return anthropic_error_response(fmt.output_error(first))
        if job.stream_requested:
            response = _streaming_response(job, first)
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
    req = decode_messages_request(await request.body())
    engine = _engine(request)
    model = engine.resolve(req.model)
    generate = to_generate_request(req, fmt.new_id("msg_"))
    stream = await engine.submit(model, generate)
    return _Job(generate, model, bool(req.stream), stream)


async def _complete(request: Request, job: _Job, first: RequestOutput) -> Response:
    """Collect the message and answer one JSON object (or an error).

    Returns a 499 placeholder if the client disconnects meanwhile (the caller
    then closes the stream, aborting the request).
    """
    result = await _until_disconnect(request.receive, _collect(job, first))
    if result is _DISCONNECTED:
        return Response(status_code=CLIENT_CLOSED_STATUS)
    if isinstance(result, RequestOutput):
        return anthropic_error_response(fmt.output_error(result))
    try:
        body = result.body(job.request_id, job.model)
    except APIError as err:
        return anthropic_error_response(err)
    return _json_response(body)


async def _collect(job: _Job, first: RequestOutput) -> fmt.MessageCollector | RequestOutput:
    """Read the request to its end; return the collected message, or the
    ``error``/``abort`` output that ended it early."""
    collector = fmt.MessageCollector()
    output = first
    while not _ends_request(output):
        if _ours(output, job.request_id):
            collector.add(output)
            if collector.done:
                return collector
        output = await _next_output(job.stream, job.request_id)
    return output


def _streaming_response(job: _Job, first: RequestOutput) -> sse.SSEResponse:
    """The SSE response for ``job``; it owns (and finally closes) the stream."""
    headers = {REQUEST_ID_HEADER: fmt.new_id("req_")}
    return sse.SSEResponse(_events(job, first), headers=headers, on_close=job.stream.aclose)


async def _events(job: _Job, first: RequestOutput) -> AsyncIterator[bytes]:
    """Yield the SSE frames of one streamed message.

    ``message_start`` and ``ping``, the content as outputs arrive, then
    ``message_delta`` and ``message_stop``; if the request ends early, any
    content the ending output carries and an ``event: error`` frame. Closes
    the request stream in ``finally``, so a disconnect (which cancels or
    closes this generator) aborts the request in the worker.
    """
    try:
        events = fmt.MessageEventStream(job.request_id, job.model)
        frames = events.start(first)
        output = first
        while not _ends_request(output):
            if _ours(output, job.request_id):
                frames += events.output(output)
                if _is_final(output):
                    yield frames + events.finish(output)
                    return
            if frames:
                yield frames
                frames = b""
            output = await _next_output(job.stream, job.request_id)
        content = events.output(output) if output.index == 0 else b""
        yield frames + content + events.error(fmt.output_error(output))
    finally:
        await job.stream.aclose()


# --- POST /v1/messages/count_tokens ---------------------------------------------------------


async def count_tokens(request: Request) -> Response:
    """``POST /v1/messages/count_tokens``: ``{"input_tokens": N}``, the number
    of tokens the request's prompt (system, messages, tools) renders to.
    Errors as for :func:`messages`."""
    try:
        req = decode_count_tokens_request(await request.body())
        engine = _engine(request)
        model = engine.resolve(req.model)
        generate = to_count_request(req, fmt.new_id("count_"))
        stream = await engine.submit(model, generate)
    except APIError as err:
        return anthropic_error_response(err)
    try:
        result = await _until_disconnect(request.receive, _terminal(stream, generate.request_id))
        if result is _DISCONNECTED:
            return Response(status_code=CLIENT_CLOSED_STATUS)
        if _ends_request(result):
            return anthropic_error_response(fmt.output_error(result))
        return _json_response(fmt.count_tokens_body(result.prompt_tokens))
    finally:
        await stream.aclose()


async def _terminal(stream: RequestStream, request_id: str) -> RequestOutput:
    """Read outputs until the one that ends the request and return it."""
    while True:
        output = await _next_output(stream, request_id)
        if output.finish_reason is not None:
            return output
