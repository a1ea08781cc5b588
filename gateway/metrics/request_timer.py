"""Per-request timing and counting for ``GET /metrics``.

A :class:`RequestTimer` is what :meth:`gateway.metrics.registry.Metrics.request_started`
returns for one request; the worker handle's accounting
(:class:`gateway.workers.inflight.PendingRequest`) feeds it every worker output
and finishes it once. It updates the request-path series of a
:class:`RequestSeries` (TTFT, inter-token latency, end-to-end latency,
queue time, token and request counters), which the
:class:`gateway.metrics.registry.Metrics` registry declares: the registry
imports this module, never the other way.

Runs on the gateway's event loop only; no locks beyond prometheus-client's
own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from prometheus_client import Counter, Histogram


@dataclass(frozen=True)
class RequestSeries:
    """The series a :class:`RequestTimer` updates (each labelled by model;
    ``request_success`` also by finish reason) and the ``clock`` that gives
    the default ``now`` of every timing call. ``audio_seconds_out``: seconds
    of audio synthesised (speech models)."""

    clock: Callable[[], float]
    request_success: Counter
    prompt_tokens: Counter
    prompt_tokens_cached: Counter
    generation_tokens: Counter
    time_to_first_token: Histogram
    inter_token_latency: Histogram
    e2e_request_latency: Histogram
    request_queue_time: Histogram
    audio_seconds_out: Counter | None = None


class RequestTimer:
    """Per-request timing and counting; obtain one from :meth:`gateway.metrics.registry.Metrics.request_started`.

    Methods are cheap (a few arithmetic operations and histogram
    observations) so they can be called for every streamed output on the
    event loop. All ``now`` arguments are :func:`time.monotonic` values and
    default to the series' clock. After :meth:`finished` every call
    is ignored.

    Semantics:

    * TTFT: observed once, at the first output of the request (any choice)
      carrying ``tokens > 0``, as ``now - start``.
    * Inter-token latency: per choice. The first output of a choice with
      tokens starts its clock (it is not an ITL sample); every later output
      with ``tokens = k > 0`` observes ``gap / k`` **k times**, where ``gap``
      is the time since that choice's previous output with tokens. So the
      histogram counts one sample per decoded token after a choice's first
      (as vLLM does per token) and its ``_sum`` is total decode time.
      Outputs with ``tokens == 0`` neither observe nor move the clock.
    * ``generation_tokens_total`` grows with each output's ``tokens`` so
      throughput is visible while long generations stream; :meth:`finished`
      tops it up to ``completion_tokens`` if fewer were reported.
    """

    __slots__ = (
        "_metrics",
        "model",
        "request_id",
        "start",
        "_done",
        "_first_token",
        "_last_token_at",
        "_generated",
        "_queued",
        "_gen",
        "_ttft",
        "_itl",
    )

    def __init__(self, metrics: RequestSeries, model: str, start: float, request_id: str = "") -> None:
        """Use :meth:`gateway.metrics.registry.Metrics.request_started` instead of constructing this."""
        self._metrics = metrics
        self.model = model
        self.request_id = request_id
        self.start = start
        self._done = False
        self._first_token = False
        self._last_token_at: dict[int, float] = {}
        self._generated = 0
        self._queued = False
        # label children resolved once: the per-output path does no lookups
        self._gen = metrics.generation_tokens.labels(model)
        self._ttft = metrics.time_to_first_token.labels(model)
        self._itl = metrics.inter_token_latency.labels(model)

    @property
    def done(self) -> bool:
        """True once :meth:`finished` has been called."""
        return self._done

    def output(self, *, tokens: int, now: float | None = None, index: int = 0) -> None:
        """Record a worker output carrying ``tokens`` new completion tokens of choice ``index``.

        ``tokens`` may be 0 (text held back, final output without a token).
        See the class docstring for how TTFT and inter-token latency are
        derived.
        """
        if self._done or tokens <= 0:
            return
        t = self._metrics.clock() if now is None else now
        self._generated += tokens
        self._gen.inc(tokens)
        if not self._first_token:
            self._first_token = True
            self._ttft.observe(max(0.0, t - self.start))
        last = self._last_token_at.get(index)
        self._last_token_at[index] = t
        if last is not None:
            per_token = max(0.0, t - last) / tokens
            observe = self._itl.observe
            for _ in range(tokens):
                observe(per_token)

    def audio(self, seconds: float) -> None:
        """Count ``seconds`` of audio this request's worker synthesised."""
        if self._done or seconds <= 0 or self._metrics.audio_seconds_out is None:
            return
        self._metrics.audio_seconds_out.labels(self.model).inc(seconds)

    def queued(self, seconds: float) -> None:
        """Observe the worker-reported queue time of this request (first call only)."""
        if self._done or self._queued:
            return
        self._queued = True
        self._metrics.request_queue_time.labels(self.model).observe(max(0.0, seconds))

    def finished(
        self,
        *,
        reason: str,
        prompt_tokens: int,
        cached_tokens: int,
        completion_tokens: int,
        now: float | None = None,
    ) -> None:
        """End the request: count it and observe its end-to-end latency.

        Effective exactly once; later calls are ignored, so it is safe in a
        ``finally`` block after an earlier explicit call.

        ``reason`` is one of :data:`FINISHED_REASONS`: ``abort`` when the
        client went away or the server shut down, ``error`` for any failure.
        ``prompt_tokens`` is the whole prompt (cached tokens included),
        ``cached_tokens`` the part reused from the prefix cache and
        ``completion_tokens`` the tokens generated over all choices (tokens
        not yet seen through :meth:`output` are counted now).
        """
        if self._done:
            return
        self._done = True
        t = self._metrics.clock() if now is None else now
        m = self._metrics
        model = self.model
        m.request_success.labels(model, reason).inc()
        if prompt_tokens > 0:
            m.prompt_tokens.labels(model).inc(prompt_tokens)
        if cached_tokens > 0:
            m.prompt_tokens_cached.labels(model).inc(cached_tokens)
        missing = completion_tokens - self._generated
        if missing > 0:
            self._gen.inc(missing)
        m.e2e_request_latency.labels(model).observe(max(0.0, t - self.start))
