"""Starlette endpoints of the OpenAI-compatible API.

``chat_completions`` (POST /v1/chat/completions), ``completions``
(POST /v1/completions), ``list_models`` (GET /v1/models) and
``retrieve_model`` (GET /v1/models/{model:path}). They reach the workers
only through the :class:`~gateway.engine_api.Engine` in
``request.app.state.engine`` and never block the event loop.

Generation flow: decode and validate the body, resolve the model, submit,
then await the first output *before* any header is sent, so a request the
worker refuses (e.g. a prompt longer than the context) is answered with a
proper status even when ``stream`` is true. After that, a stream is sent as
SSE chunks ending with ``data: [DONE]``; otherwise the text is collected
into one object. Whatever happens (client gone, error, cancellation) the
request stream is closed, which aborts the request in the worker.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Union

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive

from gateway import openai_format as fmt
from gateway import sse
from gateway.engine_api import Engine, RequestStream
from gateway.errors import APIError, model_not_found
from gateway.openai_schema import (
    ChatCompletionRequest,
    CompletionRequest,
    decode_chat_request,
    decode_completion_request,
    include_usage,
    to_generate_request,
)
from shared.protocol import RequestOutput

log = logging.getLogger("mlxd.gateway.openai")

CLIENT_CLOSED_STATUS = 499
"""Status recorded (never seen by anyone) when the client left before the
response started."""

JSON_MEDIA_TYPE = "application/json"
"""Content type of every non-streamed answer."""

ChunkStream = Union[fmt.ChatChunkStream, fmt.CompletionChunkStream]
"""Either endpoint's stream-chunk builder."""

OpenAIRequest = Union[ChatCompletionRequest, CompletionRequest]
"""Either endpoint's decoded request."""


def error_response(err: APIError) -> JSONResponse:
    """Return the OpenAI-shaped JSON response for ``err`` (its status, body
    ``{"error": {...}}`` and ``Retry-After`` when set)."""
    return JSONResponse(err.openai_body(), status_code=err.status, headers=err.headers())


# --- worker errors -------------------------------------------------------------

# error_kind -> (status, code, retry_after, default message)
_KINDS: dict[str, tuple[int, str | None, int | None, str]] = {
    "invalid_request": (400, None, None, "The model worker rejected the request"),
    "context_length_exceeded": (
        400,
        "context_length_exceeded",
        None,
        "The request exceeds the model's context length",
    ),
    "overloaded": (503, "overloaded", 1, "The model is overloaded; retry shortly"),
    "unavailable": (503, "model_unavailable", 1, "The model is unavailable; retry shortly"),
    "internal": (500, "internal_error", None, "The model worker failed while generating"),
}


def output_error(output: RequestOutput, prompt_param: str) -> APIError:
    """Return the client error for a terminal ``"error"`` or ``"abort"`` output.

    ``error_kind`` picks the status (invalid_request/context_length_exceeded
    400, overloaded/unavailable 503 with ``Retry-After: 1``, internal 500;
    an unknown kind is treated as internal). A context-length error names
    ``prompt_param`` (``messages`` or ``prompt``). An abort is a 503.
    """
    if output.finish_reason == "abort":
        return APIError(503, "The request was aborted before it finished", code="aborted", retry_after=1)
    status, code, retry_after, default = _KINDS.get(output.error_kind or "internal", _KINDS["internal"])
    param = prompt_param if output.error_kind == "context_length_exceeded" else None
    return APIError(status, output.error or default, param=param, code=code, retry_after=retry_after)


def _lost_output(request_id: str) -> RequestOutput:
    """A terminal error standing in for one the stream failed to deliver."""
    return RequestOutput(
        request_id=request_id,
        finish_reason="error",
        error="The request ended without a result",
        error_kind="unavailable",
    )


async def _next_output(stream: RequestStream, request_id: str) -> RequestOutput:
    """Return the next output; if the stream ended without a terminal one
    (a broken Engine promise), return a terminal ``unavailable`` error."""
    try:
        return await stream.__anext__()
    except StopAsyncIteration:
        log.error("request %s: stream ended without a terminal output", request_id)
        return _lost_output(request_id)


# --- client disconnects --------------------------------------------------------

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


# --- endpoint plumbing ---------------------------------------------------------


@dataclass(frozen=True)
class _Endpoint:
    """What differs between chat and completions."""

    id_prefix: str
    prompt_param: str
    decode: Callable[[bytes], OpenAIRequest]
    chunks: type[fmt.ChatChunkStream] | type[fmt.CompletionChunkStream]
    body: Callable[..., bytes]


_CHAT = _Endpoint(
    id_prefix="chatcmpl-",
    prompt_param="messages",
    decode=decode_chat_request,
    chunks=fmt.ChatChunkStream,
    body=fmt.chat_completion_body,
)
_COMPLETIONS = _Endpoint(
    id_prefix="cmpl-",
    prompt_param="prompt",
    decode=decode_completion_request,
    chunks=fmt.CompletionChunkStream,
    body=fmt.text_completion_body,
)


@dataclass(frozen=True)
class _Job:
    """One admitted generation request."""

    endpoint: _Endpoint
    request: OpenAIRequest
    request_id: str
    created: int
    model: str
    stream: RequestStream


def _engine(request: Request) -> Engine:
    """The Engine the app was built with."""
    return request.app.state.engine


async def chat_completions(request: Request) -> Response:
    """``POST /v1/chat/completions``: a ``chat.completion`` object, or an SSE
    stream of ``chat.completion.chunk`` when ``stream`` is true. Errors are
    OpenAI error JSON with the matching status."""
    return await _generate(request, _CHAT)


async def completions(request: Request) -> Response:
    """``POST /v1/completions``: a ``text_completion`` object, or an SSE
    stream of them when ``stream`` is true. Errors as for chat."""
    return await _generate(request, _COMPLETIONS)


async def _generate(request: Request, endpoint: _Endpoint) -> Response:
    """Validate, submit, and answer one generation request."""
    try:
        job = await _submit(request, endpoint)
    except APIError as err:
        return error_response(err)
    handed_off = False
    try:
        first = await _until_disconnect(request.receive, _next_output(job.stream, job.request_id))
        if first is _DISCONNECTED:
            return Response(status_code=CLIENT_CLOSED_STATUS)
        if first.finish_reason in ("error", "abort"):
            return error_response(output_error(first, endpoint.prompt_param))
        if job.request.stream:
            response = _streaming_response(job, first)
            handed_off = True
            return response
        return await _complete(request, job, first)
    finally:
        if not handed_off:
            await job.stream.aclose()


async def _submit(request: Request, endpoint: _Endpoint) -> _Job:
    """Decode the body, resolve the model and submit the request.

    Raises:
        APIError: 400 invalid body, 404 unknown model, 503 worker not ready.
    """
    req = endpoint.decode(await request.body())
    engine = _engine(request)
    model = engine.resolve(req.model)
    request_id = endpoint.id_prefix + uuid.uuid4().hex
    stream = await engine.submit(model, to_generate_request(req, request_id))
    return _Job(endpoint, req, request_id, int(time.time()), model, stream)


# --- non-streaming ---------------------------------------------------------------


async def _complete(request: Request, job: _Job, first: RequestOutput) -> Response:
    """Collect the whole text and answer one JSON object (or an error).

    Returns a 499 placeholder if the client disconnects meanwhile (the caller
    then closes the stream, aborting the request).
    """
    result = await _until_disconnect(request.receive, _collect(job, first))
    if result is _DISCONNECTED:
        return Response(status_code=CLIENT_CLOSED_STATUS)
    text, last = result
    if last.finish_reason not in ("stop", "length"):
        return error_response(output_error(last, job.endpoint.prompt_param))
    body = job.endpoint.body(
        request_id=job.request_id,
        created=job.created,
        model=job.model,
        text=text,
        finish_reason=last.finish_reason,
        prompt_tokens=last.prompt_tokens,
        completion_tokens=last.completion_tokens,
    )
    return Response(body, media_type=JSON_MEDIA_TYPE)


async def _collect(job: _Job, first: RequestOutput) -> tuple[str, RequestOutput]:
    """Return the concatenated text of all outputs and the terminal output."""
    pieces: list[str] = []
    output = first
    while True:
        if output.text:
            pieces.append(output.text)
        if output.finish_reason is not None:
            return "".join(pieces), output
        output = await _next_output(job.stream, job.request_id)


# --- streaming ---------------------------------------------------------------------


def _streaming_response(job: _Job, first: RequestOutput) -> sse.SSEResponse:
    """The SSE response for ``job``; it owns (and finally closes) the stream."""
    chunks = job.endpoint.chunks(job.request_id, job.created, job.model, include_usage(job.request))
    return sse.SSEResponse(_events(job, chunks, first), on_close=job.stream.aclose)


async def _events(job: _Job, chunks: ChunkStream, first: RequestOutput) -> AsyncIterator[bytes]:
    """Yield the SSE frames of one streamed response, ending with ``[DONE]``.

    Closes the request stream in ``finally``, so a disconnect (which cancels
    or closes this generator) aborts the request in the worker.
    """
    try:
        output = first
        opening = chunks.start()
        while output.finish_reason is None:
            if output.text or opening:
                yield opening + (chunks.text(output.text) if output.text else b"")
                opening = b""
            output = await _next_output(job.stream, job.request_id)
        yield opening + _closing_frames(job, chunks, output) + sse.DONE
    finally:
        await job.stream.aclose()


def _closing_frames(job: _Job, chunks: ChunkStream, last: RequestOutput) -> bytes:
    """Frames for the terminal output: finish (+ usage) chunks, or any final
    text followed by an error frame for ``error``/``abort``."""
    if last.finish_reason in ("stop", "length"):
        return chunks.finish(last.finish_reason, last.text, last.prompt_tokens, last.completion_tokens)
    err = output_error(last, job.endpoint.prompt_param)
    code = err.code or last.error_kind or "internal_error"
    text = chunks.text(last.text) if last.text else b""
    return text + fmt.error_frame(err.message, code)


# --- models ---------------------------------------------------------------------------


async def list_models(request: Request) -> Response:
    """``GET /v1/models``: every configured model under its canonical name."""
    return Response(fmt.model_list_body(_engine(request).models()), media_type=JSON_MEDIA_TYPE)


async def retrieve_model(request: Request) -> Response:
    """``GET /v1/models/{model}``: one model object (an alias answers with its
    canonical model), or 404 ``model_not_found``."""
    name = request.path_params.get("model", "")
    engine = _engine(request)
    try:
        canonical = engine.resolve(name)
        info = next((m for m in engine.models() if m.name == canonical), None)
        if info is None:
            raise model_not_found(name)
    except APIError as err:
        return error_response(err)
    return Response(fmt.model_body(info), media_type=JSON_MEDIA_TYPE)
