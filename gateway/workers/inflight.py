"""The requests in flight on one model's worker: their output queues, their
accounting, and the one log line each ends with.

:class:`InflightRequests` is the table a
:class:`gateway.workers.handle.WorkerHandle` routes its worker's outputs
through; :class:`PendingRequest` is one request's record in it and
:class:`WorkerRequestStream` the stream its caller reads.

Each request ends with one line on the ``mlxd.requests`` log (and one
metrics observation) carrying the prompt token count the worker computed.
A request the gateway aborts (client gone, slow reader) frees its slot at
once, but its line waits for the worker's own end of that request, which
carries the count even when no output had arrived yet; it is written
anyway when that worker dies, or after :data:`ABORT_LOG_WAIT` seconds.

Finish rules come from the wire contract (``RequestOutput.ends_request``,
:class:`shared.protocol.OpenChoices`); nothing here re-derives them.

Everything here runs on the gateway's event loop (the abort timers are
event-loop timers); no locks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.core.grants import current_grant
from shared.protocol import AbortRequest, OpenChoices, RequestOutput

if TYPE_CHECKING:
    from gateway.workers.process import Incarnation

log = logging.getLogger("mlxd.gateway.worker")
requests_log = logging.getLogger("mlxd.requests")

ABORT_LOG_WAIT = 60.0
"""Seconds the log line of a request the gateway aborted waits for the
worker's end of it (which carries the prompt token count)."""

MAX_BUFFERED_OUTPUTS = 512
"""Outputs a request may have waiting for its client; a client that reads
slower than that is dropped (its request aborted) so it cannot hold memory
and a batch slot indefinitely."""


class PendingRequest:
    """One in-flight request: its output queue and accounting.

    ``incarnation`` is the number of the worker incarnation it was sent
    to; ``timer`` its :class:`gateway.metrics.request_timer.RequestTimer` (None
    without metrics). ``choices`` counts the choices still expecting a
    terminal output; ``tokens`` the last completion count seen per choice;
    ``prompt_tokens`` and ``cached_tokens`` the worker's counts from its
    latest output. After a gateway abort, ``unsettled`` counts the choices
    whose end the worker has still to report and ``wait`` is the timer
    that writes the log line if it never does. ``grant`` is the API key's
    :class:`~gateway.core.grants.KeyGrant` the request was submitted
    under (None: none), told the request's tokens once, at its end.
    """

    __slots__ = (
        "queue",
        "incarnation",
        "n",
        "choices",
        "tokens",
        "timer",
        "started",
        "model",
        "prompt_tokens",
        "cached_tokens",
        "unsettled",
        "wait",
        "grant",
    )

    def __init__(self, incarnation: int, n: int, timer: Any, model: str) -> None:
        self.queue: asyncio.Queue[RequestOutput] = asyncio.Queue()
        self.incarnation = incarnation
        self.n = n
        self.choices = OpenChoices(n)
        self.tokens: dict[int, int] = {}
        self.timer = timer
        self.started = time.monotonic()
        self.model = model
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.unsettled: OpenChoices | None = None
        self.wait: asyncio.TimerHandle | None = None
        self.grant = current_grant.get()

    def record(self, output: RequestOutput) -> None:
        """Count ``output``'s new tokens (and audio seconds) for metrics and
        keep the worker's prompt counts."""
        if output.prompt_tokens:
            self.prompt_tokens = output.prompt_tokens
            self.cached_tokens = output.cached_tokens
        before = self.tokens.get(output.index, 0)
        self.tokens[output.index] = max(before, output.completion_tokens)
        if self.timer is not None:
            if output.queue_seconds is not None:
                self.timer.queued(output.queue_seconds)
            self.timer.output(tokens=self.tokens[output.index] - before, index=output.index)
            if output.audio_seconds:
                self.timer.audio(output.audio_seconds)

    def finish(self, request_id: str, last: RequestOutput) -> None:
        """Observe the end of the request and write its log line (prompt
        counts from ``last``, else from the latest output that had them)."""
        reason = last.finish_reason or "error"
        completion = sum(self.tokens.values())
        prompt = last.prompt_tokens or self.prompt_tokens
        cached = last.cached_tokens if last.prompt_tokens else self.cached_tokens
        if self.grant is not None:
            self.grant.spent(prompt + completion)
        if self.timer is not None:
            self.timer.finished(
                reason=reason,
                prompt_tokens=prompt,
                cached_tokens=cached,
                completion_tokens=completion,
            )
        requests_log.info(
            "request %s model=%s status=%s prompt_tokens=%d cached_tokens=%d completion_tokens=%d seconds=%.3f",
            request_id,
            self.model,
            reason,
            prompt,
            cached,
            completion,
            time.monotonic() - self.started,
        )


class WorkerRequestStream:
    """The :class:`gateway.core.backend.RequestStream` of one request.

    Yields the request's outputs and stops after its end (every choice
    finished, or an error/abort). ``aclose`` before the end calls
    ``abort(request_id, pending)`` (the handle's
    :meth:`gateway.workers.handle.WorkerHandle.abort`).
    """

    def __init__(self, request_id: str, pending: PendingRequest, abort: Callable[[str, PendingRequest], None]) -> None:
        self._request_id = request_id
        self._pending = pending
        self._abort = abort
        self._choices = OpenChoices(pending.n)
        self._done = False

    def __aiter__(self) -> WorkerRequestStream:
        return self

    async def __anext__(self) -> RequestOutput:
        if self._done:
            raise StopAsyncIteration
        output = await self._pending.queue.get()
        self._choices.close(output)
        self._done = self._choices.done
        return output

    async def aclose(self) -> None:
        """Abort the request in the worker unless it already finished."""
        if self._done:
            return
        self._done = True
        self._abort(self._request_id, self._pending)


class InflightRequests:
    """The requests in flight on one model's worker, by request id.

    ``sequences`` counts the open choices of all of them (what the
    worker's batch and queue hold for this gateway). ``on_retired`` is
    called each time a request stops being tracked (the handle then marks
    itself used and, once nothing is in flight, starts its idle timer).
    Requests the gateway aborted wait in a second table until the worker
    reports their end (see the module docstring).
    """

    def __init__(self, on_retired: Callable[[], None]) -> None:
        self._inflight: dict[str, PendingRequest] = {}
        self._settling: dict[str, PendingRequest] = {}  # aborted here; log line waits for the worker
        self._on_retired = on_retired
        self.sequences = 0

    def __len__(self) -> int:
        return len(self._inflight)

    def ids(self) -> list[str]:
        """The ids of the requests in flight."""
        return list(self._inflight)

    def add(self, request_id: str, pending: PendingRequest) -> None:
        """Track ``pending`` under ``request_id`` and count its choices."""
        self._inflight[request_id] = pending
        self.sequences += pending.choices.open

    def route(self, output: RequestOutput, incarnation: Incarnation | None) -> None:
        """Deliver one worker output to its request's queue and account
        for it; an output of a request no longer tracked is dropped (or
        settles a gateway abort). A request whose client has
        :data:`MAX_BUFFERED_OUTPUTS` outputs unread is aborted instead
        (through ``incarnation``, the worker's current one)."""
        pending = self._inflight.get(output.request_id)
        if pending is None:
            settling = self._settling.get(output.request_id)
            if settling is not None:
                self._settling_output(output.request_id, settling, output)
            return
        if pending.queue.qsize() >= MAX_BUFFERED_OUTPUTS and output.finish_reason is None:
            self._drop_slow_reader(output.request_id, pending, incarnation)
            return
        pending.record(output)
        pending.queue.put_nowait(output)
        if output.ends_request:
            self._retire(output.request_id, pending, output)
        elif pending.choices.close(output):
            self.sequences -= 1
            if pending.choices.done:
                self._retire(output.request_id, pending, output)

    def abort(self, request_id: str, pending: PendingRequest, incarnation: Incarnation | None) -> None:
        """Forget ``request_id`` and ask its worker to drop it, if
        ``incarnation`` (the worker's current one) is the one it was sent
        to; no-op when ``pending`` is no longer the request in flight."""
        if self._inflight.get(request_id) is pending:
            alive = incarnation is not None and pending.incarnation == incarnation.number
            self._retire(request_id, pending, None, settle_later=alive)
            if alive:
                incarnation.send(AbortRequest([request_id]))  # type: ignore[union-attr]

    def cancel(self, request_id: str, incarnation: Incarnation | None, name: str | None) -> bool:
        """End ``request_id`` at once for its client with one terminal
        ``abort`` output and abort it as a client disconnect does
        (:meth:`abort`); False when no such request is in flight, or it was
        submitted under another API key than ``name`` (None: any)."""
        pending = self._inflight.get(request_id)
        if pending is None or (name is not None and (pending.grant is None or pending.grant.name != name)):
            return False
        output = RequestOutput(request_id=request_id, finish_reason="abort", error="The request was cancelled")
        pending.queue.put_nowait(output)
        self.abort(request_id, pending, incarnation)
        return True

    def fail_all(self, message: str) -> None:
        """End every request in flight with a terminal ``unavailable``
        error carrying ``message``, and write the log lines of the aborted
        ones still waiting for the worker (it will not answer now)."""
        for request_id, pending in list(self._inflight.items()):
            output = RequestOutput(
                request_id=request_id, finish_reason="error", error=message, error_kind="unavailable"
            )
            pending.queue.put_nowait(output)
            self._retire(request_id, pending, output)
        for request_id in list(self._settling):
            self._settle(request_id)
        self.sequences = 0

    def _drop_slow_reader(self, request_id: str, pending: PendingRequest, incarnation: Incarnation | None) -> None:
        """Abort a request whose client stopped reading."""
        log.warning("request %s: client is not reading its stream; aborting it", request_id)
        output = RequestOutput(
            request_id=request_id, finish_reason="abort", error="the client did not read the stream fast enough"
        )
        pending.queue.put_nowait(output)
        self.abort(request_id, pending, incarnation)

    def _retire(
        self, request_id: str, pending: PendingRequest, last: RequestOutput | None, *, settle_later: bool = False
    ) -> None:
        """Stop tracking a request; observe how it ended. ``settle_later``
        (a gateway abort the worker will answer): its slot is freed now,
        its log line written when the worker reports the end."""
        del self._inflight[request_id]
        still_open = pending.choices.close_all()
        self.sequences -= still_open
        if settle_later:
            pending.unsettled = OpenChoices(still_open)
            self._settling[request_id] = pending
            pending.wait = asyncio.get_running_loop().call_later(ABORT_LOG_WAIT, self._settle, request_id)
        else:
            pending.finish(request_id, last or RequestOutput(request_id=request_id, finish_reason="abort"))
        self._on_retired()

    def _settling_output(self, request_id: str, pending: PendingRequest, output: RequestOutput) -> None:
        """An output of a request the gateway aborted: keep its counts and
        write its log line once the worker has ended every choice."""
        pending.record(output)
        unsettled = pending.unsettled
        if unsettled is not None and unsettled.close(output) and unsettled.done:
            self._settle(request_id)

    def _settle(self, request_id: str) -> None:
        """Write the log line of a request the gateway aborted."""
        pending = self._settling.pop(request_id, None)
        if pending is None:
            return
        if pending.wait is not None:
            pending.wait.cancel()
        pending.finish(request_id, RequestOutput(request_id=request_id, finish_reason="abort"))
