"""HTTP/1.1 with the two guards uvicorn's h11 protocol lacks.

:class:`GuardedH11Protocol` is what :func:`gateway.server.run` gives
uvicorn as its ``http`` protocol: a request head must arrive complete
within ``server.header_timeout`` seconds (slowloris: 408, or a close), and
may be at most :data:`MAX_HEAD_BYTES` long (431). Its own error answers
are JSON in the protocol shape of the requested path
(:func:`gateway.frontend.error_shapes.error_response_for`).

Runs on the main thread's event loop, one protocol object per connection;
the header timer is an event-loop timer.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import STATUS_PHRASES, H11Protocol

from gateway.core.errors import APIError
from gateway.frontend.error_shapes import error_response_for

MAX_HEAD_BYTES = 64 * 1024
"""Largest request head (request line and headers) accepted; more gets 431."""

LINGER_SECONDS = 1.0
"""How long a connection answered with a protocol error may keep sending."""


def _head_bytes(request: h11.Request) -> int:
    """The size of ``request``'s method, target and headers."""
    return len(request.method) + len(request.target) + sum(len(n) + len(v) for n, v in request.headers)


def _path_of_partial_head(data: bytes) -> str:
    """The request path in the first line of ``data`` (an unparsed, possibly
    incomplete head), or "" when that line is not complete or not a request
    line. Used to pick the error shape for a head h11 refused mid-read."""
    line, sep, _ = data.partition(b"\r\n")
    parts = line.split(b" ")
    if not sep or len(parts) != 3 or not parts[1].startswith(b"/"):
        return ""
    return parts[1].partition(b"?")[0].decode("latin-1")


class _HeadLimitedConnection(h11.Connection):
    """A server-side h11 connection that bounds complete request heads too.

    h11 only bounds a head still incomplete after a read; a larger head that
    arrives in one read passes. This raises ``RemoteProtocolError`` (hint
    431) for any head over ``max_head`` bytes, and records the status hint
    and request path of the last protocol error for the error answer.
    """

    def __init__(self, max_head: int) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=max_head)
        self.max_head = max_head
        self.error_status = 400
        self.error_path = ""

    def next_event(self) -> Any:
        """h11's next event, refusing oversized heads (see the class)."""
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as exc:
            self.error_status = exc.error_status_hint
            self.error_path = _path_of_partial_head(self.trailing_data[0])
            raise
        if isinstance(event, h11.Request) and _head_bytes(event) > self.max_head:
            self.error_status, self.error_path = 431, event.target.partition(b"?")[0].decode("latin-1")
            raise h11.RemoteProtocolError("request head too large", error_status_hint=431)
        return event


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header timeout and a head-size limit.

    A connection that has not delivered a complete request head within
    ``header_timeout`` seconds of opening, or of its previous response
    completing, is closed (with a 408 if it had sent part of a head).
    Heads over ``config.h11_max_incomplete_event_size`` bytes get 431, other
    unparseable requests 400, both as JSON in the path's protocol shape
    instead of uvicorn's plain text; after such an answer the connection
    lingers (see :meth:`_linger`) so the client can read it. Requests in
    progress are never cut.
    """

    def __init__(self, *args: Any, header_timeout: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn = _HeadLimitedConnection(self.config.h11_max_incomplete_event_size or MAX_HEAD_BYTES)
        self.header_timeout = header_timeout
        self._header_timer: asyncio.TimerHandle | None = None
        self._lingering = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the connection and its first header timer."""
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        """Drop the header timer, then close as uvicorn does."""
        self._cancel_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Feed ``data`` to h11, or drop it once the connection is closing."""
        if not self._lingering:
            super().data_received(data)

    def handle_events(self) -> None:
        """Process received data; stop the header timer once a head is in."""
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:
            self._cancel_header_timer()

    def on_response_complete(self) -> None:
        """Start timing the next request head, then continue as uvicorn
        does (which may already process a pipelined head)."""
        if not self.transport.is_closing():
            self._arm_header_timer()
        super().on_response_complete()

    def send_400_response(self, msg: str) -> None:
        """Answer an unparseable request (431 for an oversized head) and close."""
        if self.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            self.transport.close()  # a response is already under way: nothing more can be said
            return
        status = self.conn.error_status
        if status == 431:
            err = APIError(431, f"Request head exceeds {self.conn.max_head} bytes", code="headers_too_large")
        else:
            err = APIError(status, "Invalid HTTP request", code="invalid_http_request")
        self._send_error(self.conn.error_path, err)

    def _arm_header_timer(self) -> None:
        self._cancel_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout, self._on_header_timeout)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _on_header_timeout(self) -> None:
        self._header_timer = None
        busy = self.cycle is not None and not self.cycle.response_complete
        if busy or self.transport.is_closing():
            return
        partial = self.conn.trailing_data[0]
        if partial and self.conn.our_state is h11.IDLE and self.conn.their_state is h11.IDLE:
            err = APIError(408, f"No complete request head within {self.header_timeout:g} seconds", code="timeout")
            self._send_error("", err)
        else:
            self.transport.close()

    def _send_error(self, path: str, err: APIError) -> None:
        """Write ``err`` as a complete response for ``path`` and close."""
        response = error_response_for(path, err)
        headers = [*response.raw_headers, (b"connection", b"close")]
        status = response.status_code
        for event in (
            h11.Response(status_code=status, headers=headers, reason=STATUS_PHRASES[status]),
            h11.Data(data=bytes(response.body)),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event))
        self._linger()

    def _linger(self) -> None:
        """Half-close, then discard what the client still sends for up to
        :data:`LINGER_SECONDS` before closing: closing with unread bytes
        would reset the connection and destroy the answer just written."""
        self._cancel_header_timer()
        self._lingering = True
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()
        self.transport.resume_reading()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)
