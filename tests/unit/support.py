"""A scripted ModelBackend and the clients that reach route handlers through it.

Shared by the route tests of each protocol (OpenAI, Anthropic, Responses):
no MLX, no workers. :class:`ScriptedBackend` implements
:class:`gateway.core.backend.ModelBackend` by replaying predetermined
:class:`RequestOutput` items, ending each stream like a real
``RequestStream``; :class:`Gateway` serves a protocol's routes over such an
engine to raw httpx, to the official SDKs (built on httpx2, which has the
same ASGI transport), or to a hand-driven ASGI :class:`Client` that
disconnects.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Sequence

import anthropic
import httpx
import httpx2
import msgspec
import openai
from starlette.applications import Starlette
from starlette.routing import Route

from gateway.core.backend import ModelInfo, ModelLimits
from gateway.core.errors import APIError, model_not_found
from shared.config import Config
from shared.protocol import GenerateRequest, RequestOutput, TokenLogprob, ToolCallDelta

# --- scripted outputs ------------------------------------------------------------------


def out(
    text: str = "",
    finish: str | None = None,
    *,
    prompt: int = 5,
    completion: int = 0,
    cached: int = 0,
    index: int = 0,
    reasoning: str = "",
    calls: list[ToolCallDelta] | None = None,
    logprobs: list[TokenLogprob] | None = None,
    stop_sequence: str | None = None,
    error: str | None = None,
    kind: str | None = None,
) -> RequestOutput:
    """A :class:`RequestOutput` of choice ``index`` with placeholder request id ``"?"``.

    ``finish`` is the finish reason, ``prompt``/``completion``/``cached`` the
    token totals, ``calls`` the tool-call pieces and ``error``/``kind`` the
    error message and its class; the engine fills in the real request id.
    """
    return RequestOutput(
        request_id="?",
        text=text,
        prompt_tokens=prompt,
        completion_tokens=completion,
        finish_reason=finish,
        error=error,
        error_kind=kind,
        index=index,
        cached_tokens=cached,
        logprobs=logprobs,
        reasoning=reasoning,
        tool_calls=calls,
        stop_sequence=stop_sequence,
    )


def call(index: int = 0, arguments: str = "", id: str | None = None, name: str | None = None) -> ToolCallDelta:
    """A piece of tool call ``index``: its ``id`` and ``name`` (first piece) and more ``arguments``."""
    return ToolCallDelta(index=index, id=id, name=name, arguments=arguments)


HELLO = [out("Hel", completion=1), out("", completion=2), out("lo", completion=3), out("!", "stop", completion=4)]
"""Choice 0 says ``Hello!`` in four outputs (one empty) and stops: 5 prompt, 4 completion tokens."""


# --- scripted engine -------------------------------------------------------------------


class ScriptedStream:
    """Replays outputs and stops, like a real stream, once each of the ``n``
    choices had its stop/length/tool_calls output or right after an
    error/abort. With ``hang`` it blocks after the script until closed (a
    long generation), then answers the abort terminal as a real stream would.

    ``aclose_calls`` counts :meth:`aclose` calls; ``delivered`` counts the
    scripted outputs handed out so far.
    """

    def __init__(self, outputs: Iterable[RequestOutput], hang: bool, n: int = 1) -> None:
        self._outputs = list(outputs)
        self._hang = hang
        self._n = n
        self._finished: set[int] = set()
        self._ended = False
        self._closed = asyncio.Event()
        self.aclose_calls = 0
        self.delivered = 0

    def __aiter__(self) -> ScriptedStream:
        """The stream itself."""
        return self

    async def __anext__(self) -> RequestOutput:
        """The next scripted output (after yielding to the loop once), or the
        abort terminal of a hanging stream once closed; stops after the end."""
        await asyncio.sleep(0)
        if self._ended:
            raise StopAsyncIteration
        if self.delivered < len(self._outputs):
            self.delivered += 1
            return self._note(self._outputs[self.delivered - 1])
        if self._hang:
            await self._closed.wait()
            self._hang = False
            return self._note(out(finish="abort"))
        raise StopAsyncIteration

    def _note(self, output: RequestOutput) -> RequestOutput:
        if output.finish_reason in ("error", "abort"):
            self._ended = True
        elif output.finish_reason is not None:
            self._finished.add(output.index)
            self._ended = len(self._finished) == self._n
        return output

    async def aclose(self) -> None:
        """Count the call and release a hanging stream; idempotent."""
        self.aclose_calls += 1
        self._closed.set()


class ScriptedBackend:
    """A ModelBackend whose every request replays ``script`` (with its request id).

    It serves :attr:`MODELS` (by name or alias) with ``n`` up to ``max_n``
    (default :attr:`MAX_N`); a subclass may serve others. ``submit`` raises
    ``submit_error`` when given; otherwise it records ``(model, request)`` in
    ``submitted`` and the new stream in ``streams``. ``limits_asked`` lists
    the models whose limits were asked for.
    """

    MODELS: Sequence[ModelInfo] = (ModelInfo("m", 1_700_000_000, "ready", ("alias",)),)
    """The configured models: ``m`` (ready), also called ``alias``."""

    MAX_N = 1
    """The default largest ``n``."""

    def __init__(
        self,
        script: Iterable[RequestOutput] = (),
        hang: bool = False,
        submit_error: APIError | None = None,
        max_n: int | None = None,
    ) -> None:
        self.script = list(script)
        self.hang = hang
        self.submit_error = submit_error
        self.max_n = self.MAX_N if max_n is None else max_n
        self.limits_asked: list[str] = []
        self.infos = list(self.MODELS)
        self.submitted: list[tuple[str, GenerateRequest]] = []
        self.streams: list[ScriptedStream] = []

    def limits(self, model: str) -> ModelLimits:
        """``max_n`` for every model; notes ``model`` in ``limits_asked``."""
        self.limits_asked.append(model)
        return ModelLimits(max_n=self.max_n)

    def resolve(self, name: str) -> str:
        """The served model named or aliased ``name``; else 404 ``model_not_found``."""
        for info in self.infos:
            if name == info.name or name in info.aliases:
                return info.name
        raise model_not_found(name)

    def models(self) -> list[ModelInfo]:
        """The served models."""
        return list(self.infos)

    async def submit(self, model: str, request: GenerateRequest) -> ScriptedStream:
        """A stream replaying the script for ``request`` (its ``n`` choices)."""
        if self.submit_error is not None:
            raise self.submit_error
        self.submitted.append((model, request))
        outputs = [msgspec.structs.replace(o, request_id=request.request_id) for o in self.script]
        stream = ScriptedStream(outputs, self.hang, request.n)
        self.streams.append(stream)
        return stream

    @property
    def stream(self) -> ScriptedStream:
        """The one stream submitted (asserts there was exactly one)."""
        assert len(self.streams) == 1
        return self.streams[0]

    @property
    def request(self) -> GenerateRequest:
        """The one request submitted (asserts there was exactly one)."""
        assert len(self.submitted) == 1
        return self.submitted[0][1]


# --- apps and clients ------------------------------------------------------------------


class Gateway:
    """A protocol's ``routes``, each call served by a fresh Starlette app
    whose ``state.backend`` is the given engine (and ``state.config`` the
    given config, if any). The first route's path is :meth:`run`'s default.
    """

    def __init__(self, *routes: Route) -> None:
        self.routes = routes

    def app(self, engine: ScriptedBackend, config: Config | None = None) -> Starlette:
        """A new app over ``engine`` (and ``config``)."""
        app = Starlette(routes=list(self.routes))
        app.state.backend = engine
        if config is not None:
            app.state.config = config
        return app

    def http(self, engine: ScriptedBackend, config: Config | None = None) -> httpx.AsyncClient:
        """A raw httpx client of a new app, at ``http://test``."""
        return httpx.AsyncClient(transport=httpx.ASGITransport(self.app(engine, config)), base_url="http://test")

    def openai(self, engine: ScriptedBackend, config: Config | None = None) -> openai.AsyncOpenAI:
        """The ``openai`` SDK (no retries) over a new app, at ``http://test/v1``."""
        return openai.AsyncOpenAI(base_url="http://test/v1", **self._sdk_options(engine, config))

    def anthropic(self, engine: ScriptedBackend, config: Config | None = None) -> anthropic.AsyncAnthropic:
        """The ``anthropic`` SDK (no retries) over a new app, at ``http://test``."""
        return anthropic.AsyncAnthropic(base_url="http://test", **self._sdk_options(engine, config))

    def _sdk_options(self, engine: ScriptedBackend, config: Config | None) -> dict:
        # both SDKs are built on httpx2, which has the same ASGI transport as httpx
        transport = httpx2.ASGITransport(self.app(engine, config))
        return {"api_key": "x", "max_retries": 0, "http_client": httpx2.AsyncClient(transport=transport)}

    async def run(
        self, engine: ScriptedBackend, client: Client, path: str | None = None, spec_version: str = "2.3"
    ) -> None:
        """POST ``client``'s body to ``path`` (default: the first route's) of a
        new app over ``engine``, with ASGI ``spec_version``. Fails unless the
        app finishes within 2 s on its own: a disconnect is noticed, not timed
        out."""
        scope = http_scope(path or self.routes[0].path, spec_version)
        await asyncio.wait_for(self.app(engine)(scope, client.receive, client.send), 2)


def http_scope(path: str, spec_version: str = "2.3") -> dict:
    """The ASGI scope of an HTTP/1.1 JSON ``POST`` to ``path`` on host ``test``."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": spec_version},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"test"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 5000),
        "server": ("test", 80),
    }


class Client:
    """A hand-driven ASGI client that sends ``body`` as JSON and disconnects
    after ``read_chunks`` non-empty body chunks (or, with ``read_chunks=0``,
    right after sending the request). With ``raise_on_send`` every send after
    the disconnect raises ``OSError`` (a reset connection). ``messages``
    holds what the app sent."""

    def __init__(self, body: dict, read_chunks: int, raise_on_send: bool = False) -> None:
        self.body = json.dumps(body).encode()
        self.read_chunks = read_chunks
        self.raise_on_send = raise_on_send
        self.gone = asyncio.Event()
        self.sent_body = False
        self.messages: list[dict] = []
        if read_chunks == 0:
            self.gone.set()

    async def receive(self) -> dict:
        """The request body first; then ``http.disconnect`` once gone."""
        if not self.sent_body:
            self.sent_body = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        """Record ``message``; go away after ``read_chunks`` body chunks."""
        if self.gone.is_set() and self.raise_on_send:
            raise OSError("connection reset")
        self.messages.append(message)
        chunks = [m for m in self.messages if m["type"] == "http.response.body" and m.get("body")]
        if len(chunks) >= self.read_chunks:
            self.gone.set()


# --- response bodies -------------------------------------------------------------------


def sse_events(body: bytes) -> list[tuple[str, dict]]:
    """``(event, data)`` of each SSE frame, checking that every frame has
    exactly one ``event:`` line and one ``data:`` line whose type matches."""
    assert body.endswith(b"\n\n")
    result = []
    for frame in body.decode().split("\n\n")[:-1]:
        lines = frame.split("\n")
        assert len(lines) == 2, frame
        assert lines[0].startswith("event: "), frame
        assert lines[1].startswith("data: "), frame
        event, data = lines[0][7:], json.loads(lines[1][6:])
        assert data["type"] == event
        result.append((event, data))
    return result
