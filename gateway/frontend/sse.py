"""Server-sent events framing, bytes out.

A frame is one or more ``field: value`` lines followed by a blank line. This
module builds the frames the gateway streams: ``data:`` frames (OpenAI),
``event:`` + ``data:`` frames (Anthropic), the OpenAI ``data: [DONE]``
terminator and keep-alive comments. Payloads that contain line breaks are
split over several ``data:`` lines, so a frame can never be cut short by its
own content. :class:`SSEResponse` is the Starlette response that carries
such frames and guarantees its clean-up runs however the stream ends.
"""

from __future__ import annotations

import re
from typing import Any, AsyncIterable, Awaitable, Callable, Mapping

import anyio
import msgspec
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

DATA_PREFIX = b"data: "
"""What starts every ``data:`` line (the single space is part of the field
separator and is stripped by SSE parsers)."""

FRAME_END = b"\n\n"
"""What ends a frame: the end of its last line plus the blank line."""

DONE = b"data: [DONE]\n\n"
"""The OpenAI end-of-stream marker frame."""

KEEPALIVE = b": keep-alive\n\n"
"""A comment frame; clients ignore it, proxies see traffic."""

MEDIA_TYPE = "text/event-stream"
"""The content type of an SSE response."""

_LINE_BREAK = re.compile(rb"\r\n|\r|\n")
_json_encoder = msgspec.json.Encoder()


def _as_bytes(value: bytes | str) -> bytes:
    """Return ``value`` as UTF-8 bytes."""
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _field_lines(field: bytes, value: bytes) -> bytes:
    """Return ``value`` as one ``field`` line per line of ``value``.

    Every line ends with ``\\n``; an empty ``value`` still yields one line.
    """
    if b"\n" not in value and b"\r" not in value:
        return field + value + b"\n"
    return b"".join(field + line + b"\n" for line in _LINE_BREAK.split(value))


def data_frame(payload: bytes | str) -> bytes:
    """Return a frame carrying ``payload`` as its data.

    A payload with line breaks (``\\n``, ``\\r`` or ``\\r\\n``) becomes several
    ``data:`` lines, which a client joins back with ``\\n``.
    """
    return _field_lines(DATA_PREFIX, _as_bytes(payload)) + b"\n"


def event_frame(event: str, payload: bytes | str) -> bytes:
    """Return a frame with an ``event:`` line naming ``event`` and ``payload``
    as its data.

    Raises:
        ValueError: ``event`` is empty or contains a line break.
    """
    if not event or "\n" in event or "\r" in event:
        raise ValueError("an SSE event name must be a non-empty single line")
    return b"event: " + event.encode("utf-8") + b"\n" + data_frame(payload)


def json_frame(obj: Any, event: str | None = None) -> bytes:
    """Return a frame whose data is ``obj`` encoded as JSON (msgspec), with an
    ``event:`` line when ``event`` is given.

    Raises:
        TypeError: ``obj`` is not JSON-encodable.
        ValueError: as :func:`event_frame`.
    """
    payload = _json_encoder.encode(obj)
    return data_frame(payload) if event is None else event_frame(event, payload)


class SSEResponse(StreamingResponse):
    """A ``text/event-stream`` response that notices disconnects and always
    cleans up.

    Sends ``Cache-Control: no-cache`` and ``X-Accel-Buffering: no`` (plus
    ``headers``). It listens for ``http.disconnect`` while streaming under
    every ASGI version (Starlette's own response relies on a failing ``send``
    under ASGI 2.4, which never comes while the body is idle) and stops
    streaming when the client leaves; a ``send`` that raises ``OSError``
    also counts as the client leaving. However the response ends — body
    exhausted, disconnect, error, cancellation — it closes ``content`` (so an
    async generator's ``finally`` runs even when it sits at a ``yield``) and
    then awaits ``on_close`` if given; both are shielded from cancellation
    and both run even if the first fails. An exception raised by ``content``
    propagates after the clean-up. ``media_type`` replaces
    ``text/event-stream`` for another line-framed stream (Ollama's NDJSON).
    """

    def __init__(
        self,
        content: AsyncIterable[bytes],
        *,
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
        on_close: Callable[[], Awaitable[None]] | None = None,
        media_type: str = MEDIA_TYPE,
    ) -> None:
        merged = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        merged.update(headers or {})
        super().__init__(content, status_code=status_code, headers=merged, media_type=media_type)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Stream the body until it ends or the client leaves; then clean up
        as described on the class."""
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        try:
            failure = await self._stream_until_disconnect(receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._close()
        if failure is not None:
            raise failure
        if self.background is not None:
            await self.background()

    async def _stream_until_disconnect(self, receive: Receive, send: Send) -> Exception | None:
        """Run the body and a disconnect listener; return when either ends.

        Returns the exception the body raised, if any (not ``OSError`` from
        ``send``, which means the client is gone).
        """
        failure: list[Exception] = []
        async with anyio.create_task_group() as group:

            async def stream() -> None:
                try:
                    await self.stream_response(send)
                except OSError:
                    pass
                except Exception as exc:  # re-raised by __call__ after clean-up
                    failure.append(exc)
                group.cancel_scope.cancel()

            group.start_soon(stream)
            await self.listen_for_disconnect(receive)
            group.cancel_scope.cancel()
        return failure[0] if failure else None

    async def _close(self) -> None:
        """Close the body iterator, then await ``on_close``."""
        try:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            if self._on_close is not None:
                await self._on_close()
