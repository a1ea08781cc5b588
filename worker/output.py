"""The worker's output thread: detokenizes, matches stop strings, and is the
only writer of the outputs socket.

It consumes, in order, the items the input and scheduler threads queue:
:class:`Admitted` (a request's text stream starts), ``TokenStep`` and
``Terminal`` from the scheduler, and ready-made contract messages. Every
``TokenStep`` becomes at most one ``StepOutputs`` message. Because this
thread alone decides when a request's terminal output is sent, each request
gets exactly one. Heartbeats go out whenever the queue is quiet for
``heartbeat_interval`` seconds and at least that often under load.
"""

from __future__ import annotations

import logging
import queue
import time
from dataclasses import dataclass
from typing import Callable

import msgspec

from shared.protocol import Heartbeat, RequestOutput, StepOutputs, WorkerStats
from worker.detok import TextStream
from worker.scheduler import Counters, Release, Terminal, TokenStep

log = logging.getLogger("mlxd.worker.output")


@dataclass
class Admitted:
    """Start tracking a request: ``stream`` is its fresh text stream."""

    request_id: str
    prompt_tokens: int
    stream: TextStream


@dataclass
class _Live:
    prompt_tokens: int
    stream: TextStream
    completion_tokens: int = 0


class Exit:
    """Sentinel: send nothing more and leave the loop."""


class OutputLoop:
    """Runs on the output thread; see the module docstring.

    ``send`` writes one contract message to the socket (called only from
    this thread). ``release`` tells the scheduler to drop a request this
    thread finished on a stop string. ``counters`` is read for heartbeats.
    """

    def __init__(
        self,
        worker_id: str,
        send: Callable[[msgspec.Struct], None],
        release: Callable[[Release], None],
        counters: Callable[[], Counters | None],
        heartbeat_interval: float = 1.0,
    ) -> None:
        self.queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._worker_id = worker_id
        self._send = send
        self._release = release
        self._counters = counters
        self._interval = heartbeat_interval
        self._live: dict[str, _Live] = {}
        self._last_beat = 0.0

    def run(self) -> None:
        """Process queued items until :class:`Exit`; never raises."""
        while True:
            try:
                item = self.queue.get(timeout=self._interval)
            except queue.Empty:
                item = None
            try:
                if isinstance(item, Exit):
                    return
                if item is not None:
                    self._handle(item)
                if time.monotonic() - self._last_beat >= self._interval:
                    self._beat()
            except Exception:
                log.exception("output thread: dropped an item")

    def _handle(self, item: object) -> None:
        if isinstance(item, TokenStep):
            outputs = [o for o in (self._token(*t) for t in item.tokens) if o is not None]
            if outputs:
                self._send(StepOutputs(step=item.step, outputs=outputs))
        elif isinstance(item, Admitted):
            self._live[item.request_id] = _Live(item.prompt_tokens, item.stream)
        elif isinstance(item, Terminal):
            self._terminal(item)
        elif isinstance(item, msgspec.Struct):
            self._send(item)

    def _token(self, request_id: str, token: int, finish: str | None) -> RequestOutput | None:
        live = self._live.get(request_id)
        if live is None:
            return None  # finished on a stop string; late tokens are dropped
        live.completion_tokens += 1
        stream = live.stream
        if finish == "stop":
            text = stream.finish()  # the token is EOS: counted, not shown
        else:
            text = stream.add(token)
            if stream.stopped:
                finish = "stop"
                self._release(Release(request_id))
            elif finish == "length":
                text += stream.finish()
        if finish is None and not text:
            return None
        if finish is not None:
            del self._live[request_id]
        return RequestOutput(
            request_id=request_id,
            text=text,
            prompt_tokens=live.prompt_tokens,
            completion_tokens=live.completion_tokens,
            finish_reason=finish,  # type: ignore[arg-type]
        )

    def _terminal(self, item: Terminal) -> None:
        live = self._live.pop(item.request_id, None)
        if live is None:
            return  # already finished here (stop string): one terminal only
        self._send(
            StepOutputs(
                step=-1,
                outputs=[
                    RequestOutput(
                        request_id=item.request_id,
                        prompt_tokens=live.prompt_tokens,
                        completion_tokens=live.completion_tokens,
                        finish_reason=item.reason,  # type: ignore[arg-type]
                        error=item.message,
                        error_kind=item.error_kind,  # type: ignore[arg-type]
                    )
                ],
            )
        )

    def _beat(self) -> None:
        self._last_beat = time.monotonic()
        c = self._counters()
        stats = WorkerStats(
            running=c.running,
            waiting=c.waiting,
            steps=c.steps,
            prompt_tokens=c.prompt_tokens,
            generated_tokens=c.generated_tokens,
            requests_finished=c.requests_finished,
            requests_aborted=c.requests_aborted,
            max_batch_seen=c.max_batch_seen,
        ) if c is not None else WorkerStats()
        self._send(Heartbeat(worker_id=self._worker_id, stats=stats))
