"""SSE framing: data/event/comment frames, the terminator, and SSEResponse
clean-up."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from gateway.frontend import sse


def test_data_frame_single_line():
    assert sse.data_frame(b'{"a":1}') == b'data: {"a":1}\n\n'
    assert sse.data_frame('{"a":"é"}') == 'data: {"a":"é"}\n\n'.encode()


def test_data_frame_empty_payload_is_one_empty_data_line():
    assert sse.data_frame(b"") == b"data: \n\n"


def test_data_frame_splits_every_line_break_kind():
    assert sse.data_frame(b"a\nb\r\nc\rd") == b"data: a\ndata: b\ndata: c\ndata: d\n\n"
    # a trailing newline is data too: it yields a final empty data line
    assert sse.data_frame(b"a\n") == b"data: a\ndata: \n\n"


def test_event_frame():
    assert sse.event_frame("ping", b'{"type":"ping"}') == b'event: ping\ndata: {"type":"ping"}\n\n'


@pytest.mark.parametrize("name", ["", "a\nb", "a\rb"])
def test_event_frame_refuses_bad_names(name):
    with pytest.raises(ValueError):
        sse.event_frame(name, b"{}")


def test_json_frame():
    assert sse.json_frame({"a": [1, "x\ny"]}) == b'data: {"a":[1,"x\\ny"]}\n\n'
    assert sse.json_frame({"type": "ping"}, event="ping") == b'event: ping\ndata: {"type":"ping"}\n\n'


def test_constants():
    assert sse.KEEPALIVE.startswith(b":") and sse.KEEPALIVE.endswith(b"\n\n")
    assert sse.DONE == b"data: [DONE]\n\n"
    assert sse.DATA_PREFIX + b"x" + sse.FRAME_END == sse.data_frame(b"x")


def _parse(body: bytes) -> list[str]:
    """Minimal SSE parser: the data of each frame."""
    events = []
    for block in body.decode().split("\n\n"):
        lines = [line[6:] for line in block.split("\n") if line.startswith("data: ")]
        if lines:
            events.append("\n".join(lines))
    return events


def test_multiline_payload_round_trips():
    payload = "line1\nline2\n\nline4"
    assert _parse(sse.data_frame(payload)) == [payload]


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_sse_response_headers_body_and_cleanup():
    closed = []

    async def body():
        try:
            yield sse.data_frame(b"1")
            yield sse.DONE
        finally:
            closed.append("gen")

    async def on_close():
        closed.append("on_close")

    async def endpoint(request):
        return sse.SSEResponse(body(), on_close=on_close)

    app = Starlette(routes=[Route("/s", endpoint)])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as client:
        resp = await client.get("/s")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers["cache-control"] == "no-cache"
    assert resp.headers["x-accel-buffering"] == "no"
    assert resp.content == b"data: 1\n\ndata: [DONE]\n\n"
    assert closed == ["gen", "on_close"]


@pytest.mark.anyio
async def test_sse_response_closes_generator_suspended_at_yield():
    """The client goes away while ``send`` is blocked (the generator sits at
    a yield): the generator's finally and on_close must still run."""
    closed = []
    blocked = asyncio.Event()

    async def body():
        try:
            while True:
                yield b"data: x\n\n"
        finally:
            closed.append("gen")

    async def on_close():
        closed.append("on_close")

    response = sse.SSEResponse(body(), on_close=on_close)

    async def receive():
        await blocked.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.body":
            blocked.set()
            await asyncio.Event().wait()  # a client that never reads

    scope = {"type": "http", "asgi": {"version": "3.0"}}
    await asyncio.wait_for(response(scope, receive, send), 5)
    assert closed == ["gen", "on_close"]


@pytest.mark.anyio
@pytest.mark.parametrize("spec_version", ["2.3", "2.4"])
async def test_sse_response_notices_disconnect_while_body_is_idle(spec_version):
    """No frame is pending (the body waits on a slow producer) when the client
    leaves: the response must still end and clean up, under ASGI 2.4 too."""
    closed = []
    started = asyncio.Event()

    async def body():
        try:
            yield b"data: first\n\n"
            started.set()
            await asyncio.Event().wait()  # a producer that never produces
            yield b"never"
        finally:
            closed.append("gen")

    async def on_close():
        closed.append("on_close")

    async def receive():
        await started.wait()
        return {"type": "http.disconnect"}

    sent = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": spec_version}}
    await asyncio.wait_for(sse.SSEResponse(body(), on_close=on_close)(scope, receive, send), 2)
    assert closed == ["gen", "on_close"]
    assert sent[1]["body"] == b"data: first\n\n"


@pytest.mark.anyio
async def test_sse_response_send_failure_counts_as_disconnect():
    closed = []

    async def body():
        try:
            while True:
                yield b"data: x\n\n"
        finally:
            closed.append("gen")

    async def receive():
        await asyncio.Event().wait()

    async def send(message):
        if message["type"] == "http.response.body":
            raise OSError("reset by peer")

    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}}
    await asyncio.wait_for(sse.SSEResponse(body())(scope, receive, send), 2)
    assert closed == ["gen"]


@pytest.mark.anyio
async def test_sse_response_body_error_propagates_after_cleanup():
    closed = []

    async def body():
        yield b"data: x\n\n"
        raise RuntimeError("producer failed")

    async def on_close():
        closed.append("on_close")

    async def receive():
        await asyncio.Event().wait()

    async def send(message):
        pass

    with pytest.raises(RuntimeError, match="producer failed"):
        await sse.SSEResponse(body(), on_close=on_close)({"type": "http"}, receive, send)
    assert closed == ["on_close"]
