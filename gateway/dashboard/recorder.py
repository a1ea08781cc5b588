"""The recent past the dashboard draws: per-second samples and recent requests.

:class:`ActivityRecorder` keeps two small ring buffers in the gateway: the
last :data:`SAMPLES` one-second :class:`~gateway.dashboard.schema.Sample`
records (tokens/s, TTFT p50/p95, MLX memory per model, running and waiting
sequences) and the last :data:`RECENT` requests (id, model, protocol, token
counts, TTFT, duration, finish; never prompt or answer text).

It learns about requests by standing between the worker handles and the
Prometheus metrics: :meth:`ActivityRecorder.metrics` wraps a
:class:`gateway.metrics.registry.Metrics` so that every
:class:`gateway.metrics.request_timer.RequestTimer` the handles start is paired
with a record here (:class:`RecordedTimer` forwards each call to the real
timer, then notes it). The protocol a request came in by is read from a
context variable that :class:`RequestProtocolMiddleware` sets per HTTP
request. Samples are closed once a second by a task started with
:meth:`ActivityRecorder.start`, which reads the current gauges (memory,
running, waiting) through the callable it is given.

Everything runs on the gateway's event loop; each call is a few appends
and additions, cheap enough for every streamed output.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from gateway.dashboard.schema import RecentRequest, Sample

SAMPLES = 300
"""Per-second samples kept: the last five minutes."""

RECENT = 50
"""Recent requests kept (running ones included)."""

SAMPLE_SECONDS = 1.0
"""Length of one sample."""

Gauges = tuple[dict[str, int], int, int]
"""What the sampler reads each second: MLX memory in use per model, and
the running and waiting sequences over all workers."""

_PROTOCOLS: dict[str, str] = {
    "/v1/chat/completions": "openai",
    "/v1/completions": "openai",
    "/v1/embeddings": "openai",
    "/v1/responses": "responses",
    "/v1/messages": "anthropic",
    "/v1/messages/count_tokens": "anthropic",
}
"""Request path -> the protocol label shown for its requests (``/api/...``
is ``ollama``; any other path is shown as itself)."""

_current_protocol: ContextVar[str] = ContextVar("mlxd_request_protocol", default="")


def protocol_of(path: str) -> str:
    """The protocol label of a request to ``path``: ``openai``,
    ``responses``, ``anthropic``, ``ollama``, else the path itself."""
    if path.startswith("/api/"):
        return "ollama"
    return _PROTOCOLS.get(path, path)


class RequestProtocolMiddleware:
    """Pure ASGI middleware: while an HTTP request is handled, the context
    variable read by :meth:`ActivityRecorder.started` names its protocol
    (see :func:`protocol_of`). Touches nothing else."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = _current_protocol.set(protocol_of(scope.get("path", "")))
        try:
            await self.app(scope, receive, send)
        finally:
            _current_protocol.reset(token)


class RequestRecord:
    """What is known of one request so far (mutable; see :class:`RecentRequest`
    for the fields). ``started`` and ``ended`` are monotonic times."""

    __slots__ = (
        "id",
        "model",
        "protocol",
        "started_at",
        "started",
        "ended",
        "ttft",
        "prompt_tokens",
        "cached_tokens",
        "completion_tokens",
        "finish",
    )

    def __init__(self, request_id: str, model: str, protocol: str, started_at: float, started: float) -> None:
        self.id = request_id
        self.model = model
        self.protocol = protocol
        self.started_at = started_at
        self.started = started
        self.ended: float | None = None
        self.ttft: float | None = None
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.completion_tokens = 0
        self.finish: str | None = None

    def view(self, now: float) -> RecentRequest:
        """The record as reported at monotonic time ``now`` (a running
        request's duration is its age)."""
        end = self.ended if self.ended is not None else now
        return RecentRequest(
            id=self.id,
            model=self.model,
            protocol=self.protocol,
            started_at=self.started_at,
            prompt_tokens=self.prompt_tokens,
            cached_tokens=self.cached_tokens,
            completion_tokens=self.completion_tokens,
            ttft_seconds=self.ttft,
            duration_seconds=max(0.0, end - self.started),
            finish=self.finish,
        )


def percentile(values: list[float], percent: int) -> float | None:
    """The nearest-rank ``percent`` percentile (1..100) of ``values``: the
    smallest value at least ``percent`` % of them are not above; None when
    empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-percent * len(ordered) // 100))  # ceil(percent * n / 100), in integers
    return ordered[rank - 1]


class ActivityRecorder:
    """The ring buffers of recent samples and requests (see the module
    docstring). ``clock`` is monotonic time and ``wall`` Unix time (tests
    pass fakes); ``samples`` and ``recent`` bound the two buffers."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        samples: int = SAMPLES,
        recent: int = RECENT,
    ) -> None:
        self.clock = clock
        self.wall = wall
        self._samples: deque[Sample] = deque(maxlen=samples)
        self._requests: deque[RequestRecord] = deque(maxlen=recent)
        self._tokens = 0
        self._ttfts: list[float] = []
        self._since = clock()
        self._task: asyncio.Task[None] | None = None

    # -- requests ---------------------------------------------------------------

    def metrics(self, inner: Any) -> RecordingMetrics:
        """``inner`` (a :class:`gateway.metrics.registry.Metrics`) with every request
        it times also recorded here; give the result to the worker pool."""
        return RecordingMetrics(inner, self)

    def started(self, model: str, request_id: str) -> RequestRecord:
        """Record a request to canonical ``model`` that starts now, under the
        protocol of the HTTP request being handled."""
        record = RequestRecord(request_id, model, _current_protocol.get() or "-", self.wall(), self.clock())
        self._requests.appendleft(record)
        return record

    def streamed(self, record: RequestRecord, tokens: int) -> None:
        """Note ``tokens`` completion tokens of ``record`` streamed now (the
        first ones fix its TTFT)."""
        if tokens <= 0 or record.finish is not None:
            return
        self._tokens += tokens
        record.completion_tokens += tokens
        if record.ttft is None:
            record.ttft = max(0.0, self.clock() - record.started)
            self._ttfts.append(record.ttft)

    def finished(self, record: RequestRecord, reason: str, prompt: int, cached: int, completion: int) -> None:
        """Note the end of ``record`` (once; later calls are ignored)."""
        if record.finish is not None:
            return
        record.finish = reason
        record.ended = self.clock()
        record.prompt_tokens = prompt
        record.cached_tokens = cached
        missing = completion - record.completion_tokens
        if missing > 0:
            self._tokens += missing
        record.completion_tokens = max(record.completion_tokens, completion)

    def recent(self) -> list[RecentRequest]:
        """The recent requests, newest first."""
        now = self.clock()
        return [r.view(now) for r in self._requests]

    # -- samples ----------------------------------------------------------------

    def sample(self, gauges: Gauges) -> Sample:
        """Close the current sample with ``gauges`` and start the next."""
        now = self.clock()
        elapsed = max(now - self._since, 1e-6)
        memory, running, waiting = gauges
        ttfts, self._ttfts = self._ttfts, []
        sample = Sample(
            t=self.wall(),
            tokens_per_second=self._tokens / elapsed,
            ttft_p50=percentile(ttfts, 50),
            ttft_p95=percentile(ttfts, 95),
            memory_bytes=dict(memory),
            running=running,
            waiting=waiting,
        )
        self._tokens = 0
        self._since = now
        self._samples.append(sample)
        return sample

    def samples(self, since: float | None = None) -> list[Sample]:
        """The kept samples, oldest first; only those after Unix time
        ``since`` when given."""
        if since is None:
            return list(self._samples)
        return [s for s in self._samples if s.t > since]

    def start(self, gauges: Callable[[], Gauges]) -> None:
        """Take a sample every :data:`SAMPLE_SECONDS` on the running loop,
        reading ``gauges`` each time, until :meth:`stop`."""
        if self._task is None:
            self._since = self.clock()
            self._task = asyncio.create_task(self._run(gauges), name="dashboard-sampler")

    async def stop(self) -> None:
        """Stop sampling (idempotent)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self, gauges: Callable[[], Gauges]) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            next_at += SAMPLE_SECONDS
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            self.sample(gauges())


class RecordedTimer:
    """A :class:`gateway.metrics.request_timer.RequestTimer` whose calls are also
    noted in an :class:`ActivityRecorder`; same methods, same contract
    (every call goes to the real timer first)."""

    __slots__ = ("_inner", "_recorder", "_record")

    def __init__(self, inner: Any, recorder: ActivityRecorder, record: RequestRecord) -> None:
        self._inner = inner
        self._recorder = recorder
        self._record = record

    @property
    def done(self) -> bool:
        """True once :meth:`finished` has been called."""
        return self._inner.done

    def queued(self, seconds: float) -> None:
        """As :meth:`RequestTimer.queued`."""
        self._inner.queued(seconds)

    def audio(self, seconds: float) -> None:
        """As :meth:`RequestTimer.audio`."""
        self._inner.audio(seconds)

    def output(self, *, tokens: int, now: float | None = None, index: int = 0) -> None:
        """As :meth:`RequestTimer.output`; the tokens count in this
        second's sample and the request's record."""
        self._inner.output(tokens=tokens, now=now, index=index)
        self._recorder.streamed(self._record, tokens)

    def finished(
        self, *, reason: str, prompt_tokens: int, cached_tokens: int, completion_tokens: int, now: float | None = None
    ) -> None:
        """As :meth:`RequestTimer.finished`; ends the request's record."""
        self._inner.finished(
            reason=reason,
            prompt_tokens=prompt_tokens,
            cached_tokens=cached_tokens,
            completion_tokens=completion_tokens,
            now=now,
        )
        self._recorder.finished(self._record, reason, prompt_tokens, cached_tokens, completion_tokens)


class RecordingMetrics:
    """The metrics the worker pool is given: ``inner``'s, with each request
    also recorded in ``recorder`` (see :meth:`ActivityRecorder.metrics`)."""

    def __init__(self, inner: Any, recorder: ActivityRecorder) -> None:
        self.inner = inner
        self.recorder = recorder

    def request_started(self, model: str, *, request_id: str = "", now: float | None = None) -> RecordedTimer:
        """As :meth:`gateway.metrics.registry.Metrics.request_started`, plus a record
        of request ``request_id`` in the recorder."""
        timer = self.inner.request_started(model, now=now, request_id=request_id)
        return RecordedTimer(timer, self.recorder, self.recorder.started(model, request_id))
