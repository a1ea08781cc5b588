"""How every protocol front-end reads an admitted request and watches its client.

The OpenAI, Responses, Anthropic and Ollama endpoints differ in their
bodies and answers but read the worker the same way, with the pieces here
(a generation answer runs them through :mod:`gateway.frontend.answer_driver`, which
drives the family's builder; embeddings and token counts use them
directly):

- Finish reasons are the contract's: ``RequestOutput.ends_choice`` (a
  ``stop``/``length``/``tool_calls`` output ends its choice) and
  ``RequestOutput.ends_request`` (an ``error``/``abort`` output ends the
  whole request), in :mod:`shared.protocol`.
- Reading: :func:`next_output` returns the next output of a
  :class:`~gateway.core.backend.RequestStream`, standing in a terminal
  ``unavailable`` error (:func:`lost_output`) if the stream ends before the
  request did (a broken ModelBackend promise), so a reader never has to handle
  ``StopAsyncIteration``.
- Client disconnects: :func:`until_disconnect` runs a piece of work while
  watching the ASGI ``receive`` channel and returns :data:`DISCONNECTED`
  instead of its result if the client leaves first (the work is then
  cancelled); :func:`client_closed` is the placeholder response recorded
  then.
- First output before headers: :func:`respond_after_first_output` awaits
  the first output *before* any header is sent, so a request the worker
  refuses (e.g. a prompt longer than the context) is answered with a proper
  status even when the client asked for a stream; then it hands over to
  the endpoint's streamed answer, or collects the whole answer while still
  watching the client. A stream whose first output takes longer than
  ``server.stream_keepalive`` seconds (a long prompt being prefilled)
  starts anyway with keep-alive comments every as many seconds until its
  first output, so clients and proxies with idle timeouts stay connected;
  an error found after that arrives as the stream's error event. Whatever
  happens (client gone, error, cancellation) the request stream is closed
  unless a streamed response took it over, which aborts the request in the
  worker.

- One output: :func:`respond_to_only_output` answers a request whose first
  output is its only one (embeddings) the same way, without a stream.
- Submitting a JSON body: :func:`decode_and_submit` reads and decodes it,
  resolves its ``model``, builds the worker request under a new id and
  submits it (the embeddings, rerank and speech routes).

Also shared: :func:`backend_of` (the app's ModelBackend), :data:`JSON_MEDIA_TYPE`
and :data:`CLIENT_CLOSED_STATUS`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Generic, Literal, Mapping, TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive

from gateway.core.backend import ModelBackend, RequestStream
from gateway.core.ids import new_id
from gateway.frontend import sse
from shared.protocol import RequestOutput

log = logging.getLogger("mlxd.gateway.request_flow")

CLIENT_CLOSED_STATUS = 499
"""Status recorded (never seen by anyone) when the client left before the
response started."""

JSON_MEDIA_TYPE = "application/json"
"""Content type of every non-streamed answer."""

FinalReason = Literal["stop", "length", "tool_calls"]
"""Finish reasons a successful choice can carry."""

DEFAULT_KEEPALIVE = 5.0
"""Seconds a stream waits for its first output before it starts with
keep-alive comments (when the app has no config, e.g. in unit tests)."""

LATE: Any = object()
"""What the first-output wait returns when the keep-alive time passed first."""

DISCONNECTED: Any = object()
"""What :func:`until_disconnect` returns when the client left first (compare
with ``is``)."""

_Collected = TypeVar("_Collected")
_Body = TypeVar("_Body")
_Work = TypeVar("_Work")


def backend_of(request: Request) -> ModelBackend:
    """Return the :class:`~gateway.core.backend.ModelBackend` the app was built with
    (``request.app.state.backend``)."""
    return request.app.state.backend


@dataclass(frozen=True)
class Submitted(Generic[_Body, _Work]):
    """A submitted request: its decoded ``body``, the resolved ``model``
    name, the ``work`` sent to the worker and the ``stream`` of its outputs."""

    body: _Body
    model: str
    work: _Work
    stream: RequestStream


async def decode_and_submit(
    request: Request,
    decode: Callable[[bytes], _Body],
    prepare: Callable[[_Body, str], _Work],
    id_prefix: str,
) -> Submitted[_Body, _Work]:
    """Decode ``request``'s body with ``decode``, resolve the model its
    ``model`` field names, build the worker request with ``prepare(body,
    new id starting with id_prefix)`` and submit it.

    Raises:
        APIError: what ``decode``, ``prepare``, the model's resolution or the
            submission refuse with (the caller answers it in its protocol's
            shape).
    """
    body = decode(await request.body())
    backend = backend_of(request)
    model = backend.resolve(body.model)  # type: ignore[attr-defined]
    work = prepare(body, new_id(id_prefix))
    stream = await backend.submit(model, work)  # type: ignore[arg-type]
    return Submitted(body, model, work, stream)


def client_closed() -> Response:
    """Return the placeholder response for a client that disconnected before
    the answer started: status :data:`CLIENT_CLOSED_STATUS`, no body. Nobody
    receives it; it only ends the handler."""
    return Response(status_code=CLIENT_CLOSED_STATUS)


# --- reading a request stream ------------------------------------------------------------


def lost_output(request_id: str) -> RequestOutput:
    """Return the terminal output standing in for one the stream failed to
    deliver: finish reason ``error``, ``error_kind`` ``unavailable``, message
    "The request ended without a result"."""
    return RequestOutput(
        request_id=request_id,
        finish_reason="error",
        error="The request ended without a result",
        error_kind="unavailable",
    )


async def next_output(stream: RequestStream, request_id: str) -> RequestOutput:
    """Return the next output of ``stream`` (the request ``request_id``).

    If the stream ends before the request did (a broken ModelBackend promise: a
    stream always delivers its request's end), log an error and return
    :func:`lost_output` instead, so the reader ends the request with a 503
    ``model_unavailable`` (529 for Anthropic) like any other failure.
    """
    try:
        return await stream.__anext__()
    except StopAsyncIteration:
        log.error("request %s: stream ended before the request finished", request_id)
        return lost_output(request_id)


# --- client disconnects ------------------------------------------------------------------


async def wait_disconnect(receive: Receive) -> None:
    """Return once the client has disconnected (``http.disconnect`` on
    ``receive``); every other message is skipped. Use only after the body
    has been read."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def until_disconnect(receive: Receive, work: Awaitable[Any]) -> Any:
    """Run ``work`` while watching ``receive`` for the client's disconnect.

    Returns the result of ``work``, or :data:`DISCONNECTED` (with ``work``
    cancelled) if the client disconnects first. Exceptions of ``work``
    propagate. Both helper tasks are finished when this returns, also when
    the caller is cancelled.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(wait_disconnect(receive))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
        return task.result() if task.done() else DISCONNECTED
    finally:
        pending = [t for t in (task, watcher) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending)


# --- the first output before any header ----------------------------------------------------


def keepalive_interval(request: Request) -> float:
    """``server.stream_keepalive`` of the app's config (or
    :data:`DEFAULT_KEEPALIVE`)."""
    config = getattr(request.app.state, "config", None)
    return config.server.stream_keepalive if config is not None else DEFAULT_KEEPALIVE


async def _first_within(waiting: asyncio.Future[RequestOutput], seconds: float | None) -> Any:
    """The result of ``waiting``, or :data:`LATE` if it is not done within
    ``seconds`` (None: wait as long as it takes). Never cancels ``waiting``."""
    await asyncio.wait((waiting,), timeout=seconds)
    return waiting.result() if waiting.done() else LATE


async def _keepalive_then(
    waiting: asyncio.Future[RequestOutput],
    frames: Callable[[RequestOutput], AsyncIterator[bytes]],
    interval: float,
    keepalive: bytes = sse.KEEPALIVE,
) -> AsyncIterator[bytes]:
    """``keepalive`` (an SSE comment by default) every ``interval`` seconds
    until ``waiting`` has the first output, then ``frames(first)``. Cancels
    ``waiting`` if the stream ends before it is done (client gone)."""
    try:
        while not waiting.done():
            await asyncio.wait((waiting,), timeout=interval)
            if not waiting.done():
                yield keepalive
        async for frame in frames(waiting.result()):
            yield frame
    finally:
        if not waiting.done():
            waiting.cancel()


async def respond_after_first_output(
    request: Request,
    stream: RequestStream,
    request_id: str,
    *,
    refuse: Callable[[RequestOutput], Response],
    streamed: Callable[[RequestOutput], AsyncIterator[bytes]] | None,
    collect: Callable[[RequestOutput], Awaitable[_Collected | RequestOutput]],
    answer: Callable[[_Collected], Response],
    stream_headers: Mapping[str, str] | None = None,
    keepalive: bytes = sse.KEEPALIVE,
    media_type: str = sse.MEDIA_TYPE,
) -> Response:
    """Answer the admitted request ``request_id`` once its first output is in.

    Awaits the first output of ``stream`` while watching the client, before
    any header is sent. Then:

    - client gone first: :func:`client_closed`;
    - the first output ends the request (``error``/``abort``):
      ``refuse(first)``, the endpoint's error response for that output;
    - ``streamed`` given (the client asked for a stream): an
      :class:`~gateway.frontend.sse.SSEResponse` (with ``stream_headers``) of the
      frames ``streamed(first)`` yields, which closes the stream when it
      ends. If the first output is not in within
      :func:`keepalive_interval` seconds, that response starts at once
      with keep-alive comments until it is, and ``streamed`` then also
      gets an ``error``/``abort`` first output (its frames must report it);
    - otherwise the whole answer: ``collect(first)`` reads the request to
      its end (with :func:`next_output`) and returns what it gathered, or
      the ``error``/``abort`` output that ended the request early. While it
      runs the client is watched: client gone, :func:`client_closed`; ended
      early, ``refuse(output)``; else ``answer(gathered)``.

    ``keepalive`` is the frame sent while waiting (an SSE comment by
    default) and ``media_type`` the streamed response's content type (an
    NDJSON stream passes an empty object of its own and
    ``application/x-ndjson``).

    In every case but the hand-over to the streamed response the stream is
    closed before this returns, also on an exception or cancellation, which
    aborts the request in the worker if it had not finished.
    """
    handed_off = False
    waiting = asyncio.ensure_future(next_output(stream, request_id))
    interval = keepalive_interval(request) if streamed is not None else None
    try:
        first = await until_disconnect(request.receive, _first_within(waiting, interval))
        if first is DISCONNECTED:
            return client_closed()
        if first is LATE:
            assert streamed is not None and interval is not None
            body = _keepalive_then(waiting, streamed, interval, keepalive)
            handed_off = True
            return sse.SSEResponse(body, headers=stream_headers, on_close=stream.aclose, media_type=media_type)
        if first.ends_request:
            return refuse(first)
        if streamed is not None:
            response = sse.SSEResponse(
                streamed(first), headers=stream_headers, on_close=stream.aclose, media_type=media_type
            )
            handed_off = True
            return response
        result = await until_disconnect(request.receive, collect(first))
        if result is DISCONNECTED:
            return client_closed()
        if isinstance(result, RequestOutput):
            return refuse(result)
        return answer(result)
    finally:
        if not handed_off:
            if not waiting.done():
                waiting.cancel()
            await stream.aclose()


async def respond_to_only_output(
    request: Request,
    stream: RequestStream,
    request_id: str,
    *,
    refuse: Callable[[RequestOutput], Response],
    answer: Callable[[RequestOutput], Response],
) -> Response:
    """Answer a request whose first output is its only one (an embedding
    request): :func:`respond_after_first_output` without a stream, ``answer``
    getting that output. ``refuse`` as there; the stream is closed before
    this returns."""

    async def collect(first: RequestOutput) -> tuple[RequestOutput]:
        return (first,)  # a bare RequestOutput would mean "ended early"

    return await respond_after_first_output(
        request,
        stream,
        request_id,
        refuse=refuse,
        streamed=None,
        collect=collect,
        answer=lambda result: answer(result[0]),
    )
