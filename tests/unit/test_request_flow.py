"""The request-reading plumbing the protocol front-ends share
(``gateway.frontend.request_flow``), against a hand-made stream and ASGI ``receive``.

The endpoints' use of it is covered end to end by the route tests; these
pin its own contract: what the helpers return, and that the request stream
is closed on every path except the hand-over to a streamed response.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from starlette.responses import Response

from gateway.frontend.request_flow import (
    CLIENT_CLOSED_STATUS,
    DISCONNECTED,
    lost_output,
    next_output,
    respond_after_first_output,
    until_disconnect,
)
from gateway.frontend.sse import KEEPALIVE, SSEResponse
from shared.protocol import RequestOutput

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


def out(text="", finish=None) -> RequestOutput:
    return RequestOutput(request_id="r", text=text, finish_reason=finish)


class Stream:
    """Replays ``outputs`` (the first after ``delay`` seconds); then ends,
    or with ``hang`` blocks forever."""

    def __init__(self, outputs=(), hang=False, delay=0.0) -> None:
        self.outputs = list(outputs)
        self.hang = hang
        self.delay = delay
        self.closed = 0

    async def __anext__(self) -> RequestOutput:
        await asyncio.sleep(self.delay)
        self.delay = 0.0
        if self.outputs:
            return self.outputs.pop(0)
        if self.hang:
            await asyncio.Event().wait()
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self.closed += 1


def client(gone: asyncio.Event | None = None, keepalive: float = 5.0) -> SimpleNamespace:
    """A request whose ``receive`` reports a disconnect once ``gone`` is set
    (never, without one), in an app whose streams start with keep-alives
    after ``keepalive`` seconds without a first output."""
    event = gone or asyncio.Event()

    async def receive() -> dict:
        await event.wait()
        return {"type": "http.disconnect"}

    config = SimpleNamespace(server=SimpleNamespace(stream_keepalive=keepalive))
    return SimpleNamespace(receive=receive, app=SimpleNamespace(state=SimpleNamespace(config=config)))


def refuse(output: RequestOutput) -> Response:
    return Response(output.finish_reason or "", status_code=500)


async def take_rest(stream: Stream, first: RequestOutput) -> list[str] | RequestOutput:
    """Collect texts up to a final output; return an ending error output."""
    texts, output = [], first
    while True:
        if output.ends_request:
            return output
        texts.append(output.text)
        if output.finish_reason is not None:
            return texts
        output = await next_output(stream, "r")


def respond(request, stream, streamed=None, collect=None):
    return respond_after_first_output(
        request,
        stream,
        "r",
        refuse=refuse,
        streamed=streamed,
        collect=collect or (lambda first: take_rest(stream, first)),
        answer=lambda texts: Response("".join(texts)),
    )


async def test_next_output_stands_in_for_a_lost_end(caplog):
    stream = Stream([out("a")])
    assert (await next_output(stream, "r")).text == "a"
    lost = await next_output(stream, "r")
    assert lost == lost_output("r")
    assert (lost.finish_reason, lost.error_kind, lost.error) == (
        "error",
        "unavailable",
        "The request ended without a result",
    )
    assert "stream ended before the request finished" in caplog.text


@pytest.mark.parametrize(
    "finish, ends",
    [(None, False), ("stop", False), ("length", False), ("tool_calls", False), ("error", True), ("abort", True)],
)
def test_finish_rules_on_the_contract(finish, ends):
    output = out(finish=finish)
    assert output.ends_request is ends
    assert output.ends_choice is (finish in ("stop", "length", "tool_calls"))


async def test_until_disconnect_returns_the_result():
    async def work():
        return 42

    assert await until_disconnect(client().receive, work()) == 42


async def test_until_disconnect_cancels_work_when_the_client_leaves():
    gone = asyncio.Event()
    cancelled = asyncio.Event()

    async def work():
        gone.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    assert await until_disconnect(client(gone).receive, work()) is DISCONNECTED
    assert cancelled.is_set()


async def test_until_disconnect_propagates_errors():
    async def work():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await until_disconnect(client().receive, work())


async def test_whole_answer_closes_the_stream():
    stream = Stream([out("a"), out("b", "stop")])
    response = await respond(client(), stream)
    assert (response.status_code, response.body) == (200, b"ab")
    assert stream.closed == 1


@pytest.mark.parametrize("script", [[out(finish="error")], [out("a"), out(finish="abort")]])
async def test_an_ending_output_is_refused(script):
    stream = Stream(script)
    response = await respond(client(), stream)
    assert response.status_code == 500 and response.body in (b"error", b"abort")
    assert stream.closed == 1


async def test_a_lost_first_output_is_refused():
    stream = Stream([])
    response = await respond(client(), stream)
    assert (response.status_code, response.body) == (500, b"error")
    assert stream.closed == 1


def frames_of(stream: Stream):
    """A ``streamed`` callback: one frame per output text up to the end."""

    async def frames(first: RequestOutput):
        output = first
        while True:
            yield f"<{output.finish_reason or output.text}>".encode()
            if output.finish_reason is not None:
                return
            output = await next_output(stream, "r")

    return frames


async def body_of(response) -> list[bytes]:
    return [frame async for frame in response.body_iterator]


async def test_streamed_answer_takes_the_stream_over():
    stream = Stream([out("a"), out("b", "stop")])
    response = await respond(client(), stream, streamed=frames_of(stream))
    assert isinstance(response, SSEResponse) and stream.closed == 0
    assert await body_of(response) == [b"<a>", b"<stop>"]


async def test_slow_first_output_starts_the_stream_with_keepalives():
    stream = Stream([out("a"), out("b", "stop")], delay=0.35)
    response = await respond(client(keepalive=0.1), stream, streamed=frames_of(stream))
    assert isinstance(response, SSEResponse) and stream.closed == 0
    body = await body_of(response)
    assert body[-2:] == [b"<a>", b"<stop>"]
    assert body[:-2] == [KEEPALIVE] * len(body[:-2]) and 2 <= len(body[:-2]) <= 3


async def test_a_line_framed_stream_keeps_alive_with_its_own_frame():
    stream = Stream([out("a"), out("b", "stop")], delay=0.35)
    response = await respond_after_first_output(
        client(keepalive=0.1),
        stream,
        "r",
        refuse=refuse,
        streamed=frames_of(stream),
        collect=lambda first: take_rest(stream, first),
        answer=lambda texts: Response("".join(texts)),
        keepalive=b'{"done":false}\n',
        media_type="application/x-ndjson",
    )
    assert response.media_type == "application/x-ndjson"
    body = await body_of(response)
    assert body[-2:] == [b"<a>", b"<stop>"]
    assert body[:-2] == [b'{"done":false}\n'] * len(body[:-2]) and len(body[:-2]) >= 2


async def test_late_error_goes_into_the_stream():
    stream = Stream([out(finish="error")], delay=0.25)
    response = await respond(client(keepalive=0.1), stream, streamed=frames_of(stream))
    assert (await body_of(response))[-1] == b"<error>"


async def test_leaving_a_late_stream_stops_waiting():
    stream = Stream(hang=True, delay=0.0)
    stream.outputs = []
    response = await respond(client(keepalive=0.05), stream, streamed=frames_of(stream))
    body = response.body_iterator
    assert await body.__anext__() == KEEPALIVE
    await body.aclose()  # what SSEResponse does when the client leaves
    await asyncio.sleep(0.01)
    assert not [t for t in asyncio.all_tasks() if "next_output" in repr(t.get_coro())]


async def test_streamed_request_refused_before_headers():
    stream = Stream([out(finish="error")])
    response = await respond(client(), stream, streamed=lambda first: pytest.fail("not refused"))
    assert response.status_code == 500
    assert stream.closed == 1


@pytest.mark.parametrize("streamed", [None, lambda first: pytest.fail("client was gone")])
async def test_disconnect_before_the_first_output(streamed):
    gone = asyncio.Event()
    gone.set()
    stream = Stream(hang=True)
    response = await respond(client(gone), stream, streamed=streamed)
    assert response.status_code == CLIENT_CLOSED_STATUS
    assert stream.closed == 1


async def test_disconnect_while_collecting():
    gone = asyncio.Event()
    stream = Stream([out("a")], hang=True)

    async def collect(first):
        gone.set()
        return await take_rest(stream, first)

    response = await respond(client(gone), stream, collect=collect)
    assert response.status_code == CLIENT_CLOSED_STATUS
    assert stream.closed == 1


async def test_stream_closed_when_collecting_fails():
    stream = Stream([out("a")])

    async def collect(first):
        raise RuntimeError("broken")

    with pytest.raises(RuntimeError):
        await respond(client(), stream, collect=collect)
    assert stream.closed == 1


async def test_respond_to_only_output_answers_with_the_first_output():
    """The one-output answer (embeddings) hands its output to ``answer``
    and closes the stream; an error output is refused."""
    from gateway.frontend.request_flow import respond_to_only_output

    for first, expected in (
        (RequestOutput(request_id="r", finish_reason="stop", prompt_tokens=3), 200),
        (RequestOutput(request_id="r", finish_reason="error", error="x", error_kind="internal"), 500),
    ):
        stream = Stream([first])
        response = await respond_to_only_output(
            client(),
            stream,
            "r",
            refuse=lambda output: Response(status_code=500),
            answer=lambda output: Response(str(output.prompt_tokens), status_code=200),
        )
        assert response.status_code == expected and stream.closed == 1
        if expected == 200:
            assert response.body == b"3"
