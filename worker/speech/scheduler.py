"""The scheduler thread of a speech worker: synthesises requests chunk by chunk, in turns.

Every admitted request (a :class:`SpeechJob`: its text already cut into
phoneme chunks on the input thread, :mod:`worker.speech.text`) joins a
round: each loop turn synthesises the next chunk of the request at the
front and moves it to the back, so requests share the worker chunk by chunk
(sentence by sentence) and a long input never holds a short one back for
more than one chunk of its own. New requests, aborts and deadlines are
checked between chunks.

Each chunk's samples go to the output thread as a
:class:`~worker.messages.Deferred` that encodes them there
(:mod:`worker.speech.encode`, one encoder per request), so encoding never
runs on this thread; the request's last chunk also finishes its file.

Every admitted request ends with exactly one terminal output: ``stop`` with
its audio, ``abort`` (client gone, shutdown), a ``timeout`` error past its
deadline, or an ``internal`` error if synthesis fails (the failure then
escapes :meth:`SpeechScheduler.run` and the worker exits to be replaced).

Threads: :meth:`SpeechScheduler.run` and :meth:`warm_up` run on the
scheduler thread, the only one touching MLX; :meth:`submit` may be called
from any thread. ``counters`` is written here and read by the output thread.
"""

from __future__ import annotations

import logging
import queue
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from shared.protocol import RequestOutput, StepOutputs
from worker.messages import Abort, Counters, Deferred, Stop
from worker.speech.encode import AudioEncoder
from worker.speech.model import SpeechModel

log = logging.getLogger("mlxd.worker.speech")


@dataclass
class SpeechJob:
    """A prepared speech request (built on the input thread): its phoneme
    ``chunks`` in order, ``voice``, ``speed``, ``response_format``, whether
    to ``stream``, its ``deadline`` (a ``time.monotonic()`` instant or None)
    and when the worker got it (``received``)."""

    request_id: str
    chunks: list[str]
    voice: str
    speed: float
    response_format: str
    stream: bool
    deadline: float | None = None
    received: float = 0.0


@dataclass
class _Live:
    """An admitted request: the next chunk to synthesise and its encoder
    (used on the output thread only)."""

    job: SpeechJob
    encoder: AudioEncoder
    phonemes: int
    next_chunk: int = 0
    samples: int = 0
    queue_seconds: float | None = None
    ended: bool = field(default=False)


class SpeechScheduler:
    """Runs ``model`` on the scheduler thread; see the module docstring.

    ``emit`` takes items for the output thread (thread-safe and
    non-blocking, e.g. the output thread's queue ``put``).
    ``sample_memory`` (the worker passes
    :func:`worker.engine.mlx_memory.record`) writes MLX's memory counts into
    ``counters`` on every loop turn, for the heartbeats. ``cache`` and
    ``speculation`` are always None (the heartbeat code reads both, as on a
    generation scheduler).
    """

    cache = None
    speculation = None

    def __init__(
        self,
        model: SpeechModel,
        emit: Callable[[object], None],
        *,
        sample_memory: Callable[[Counters], None] | None = None,
    ) -> None:
        self._model = model
        self._emit = emit
        self.inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.counters = Counters()
        self._sample_memory = sample_memory
        self._round: deque[_Live] = deque()

    def submit(self, item: object) -> None:
        """Queue a :class:`SpeechJob`, ``Abort`` or ``Stop``; any thread."""
        self.inbox.put(item)

    def warm_up(self) -> None:
        """Synthesise a few phonemes once so kernels are built before the
        worker says Ready."""
        self._model.synthesize("hˈI", self._model.voices[0], 1.0)

    def run(self) -> None:
        """The loop: apply commands, expire deadlines, synthesise one chunk.
        Returns after ``Stop`` (everything in flight aborted); a synthesis
        failure ends every request in flight with an error and then
        propagates (the worker exits, see ``worker.main``)."""
        while True:
            if not self._drain(block=not self._round):
                return
            self._expire(time.monotonic())
            if self._round:
                self._step()
            c = self.counters
            c.running = len(self._round)
            c.waiting = sum(1 for live in self._round if live.next_chunk == 0)
            if self._sample_memory is not None:
                self._sample_memory(c)  # MLX's memory counts, for the heartbeats

    # -- commands -------------------------------------------------------------

    def _drain(self, block: bool) -> bool:
        """Apply every queued command (waiting up to 0.5 s for one when
        ``block``); False when a ``Stop`` was seen."""
        try:
            item = self.inbox.get(timeout=0.5) if block else self.inbox.get_nowait()
        except queue.Empty:
            return True
        while True:
            if isinstance(item, Stop):
                self._end(list(self._round), "abort")
                return False
            if isinstance(item, SpeechJob):
                self._admit(item)
            elif isinstance(item, Abort):
                gone = set(item.request_ids)
                self._end([live for live in self._round if live.job.request_id in gone], "abort")
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return True

    def _admit(self, job: SpeechJob) -> None:
        if any(live.job.request_id == job.request_id for live in self._round):
            log.error("duplicate speech request id %s dropped", job.request_id)
            return
        encoder = AudioEncoder(job.response_format, self._model.sample_rate, job.stream)
        self._round.append(_Live(job, encoder, sum(len(c) for c in job.chunks)))

    def _expire(self, now: float) -> None:
        late = [live for live in self._round if live.job.deadline is not None and now >= live.job.deadline]
        if late:
            self.counters.requests_timed_out += len(late)
            self._end(late, "error", "timeout", "the request ran past its deadline and was stopped")

    def _end(self, lives: list[_Live], reason: str, kind: str | None = None, message: str | None = None) -> None:
        """End requests early (one terminal each, sent after whatever audio
        of theirs is already queued for the output thread)."""
        for live in lives:
            self._round.remove(live)
            if reason == "abort":
                self.counters.requests_aborted += 1
            self._emit(_terminal_error(live, reason, kind, message))

    # -- synthesis ----------------------------------------------------------------

    def _step(self) -> None:
        live = self._round.popleft()
        job = live.job
        started = time.perf_counter()
        if live.next_chunk == 0:
            live.queue_seconds = max(0.0, time.monotonic() - job.received) if job.received else None
        try:
            samples = self._model.synthesize(job.chunks[live.next_chunk], job.voice, job.speed)
        except Exception:
            log.exception("synthesis failed; failing %d requests", len(self._round) + 1)
            self._round.appendleft(live)
            self._end(list(self._round), "error", "internal", "the model worker failed while synthesising; retry")
            raise
        live.next_chunk += 1
        live.samples += samples.size
        last = live.next_chunk == len(job.chunks)
        c = self.counters
        c.steps += 1
        c.step_seconds += time.perf_counter() - started
        c.max_batch_seen = max(c.max_batch_seen, len(self._round) + 1)
        if last:
            c.requests_finished += 1
            c.prompt_tokens += live.phonemes
        else:
            self._round.append(live)
        self._emit(_chunk_output(live, samples, last, self._model.sample_rate, c.steps))


def _chunk_output(live: _Live, samples: np.ndarray, last: bool, sample_rate: int, step: int) -> Deferred:
    """The output thread's work for one synthesised chunk: encode it (and
    finish the file after the last chunk) into the request's output."""
    request_id = live.job.request_id
    total = live.samples
    waited, live.queue_seconds = live.queue_seconds, None

    def build() -> StepOutputs | None:
        if live.ended:
            return None
        data = live.encoder.add(samples)
        if last:
            data += live.encoder.finish()
            live.ended = True
        if not data and not last and not live.job.stream:
            return None
        output = RequestOutput(
            request_id=request_id,
            prompt_tokens=live.phonemes,
            finish_reason="stop" if last else None,
            audio=data,
            audio_seconds=(total if last and not live.job.stream else samples.size) / sample_rate,
            queue_seconds=waited,
        )
        return StepOutputs(step=step, outputs=[output])

    def failed(message: str) -> StepOutputs | None:
        return _terminal_error(live, "error", "internal", message).build()

    return Deferred(request_id, build, failed)


def _terminal_error(live: _Live, reason: str, kind: str | None, message: str | None) -> Deferred:
    """The output thread's work for a request ending without its audio:
    drop its encoder and send its one terminal output (nothing when it has
    already ended)."""

    def build() -> StepOutputs | None:
        if live.ended:
            return None
        live.ended = True
        live.encoder.close()
        output = RequestOutput(
            request_id=live.job.request_id,
            prompt_tokens=live.phonemes,
            finish_reason=reason,  # type: ignore[arg-type]
            error=message,
            error_kind=kind,  # type: ignore[arg-type]
        )
        return StepOutputs(step=-1, outputs=[output])

    return Deferred(live.job.request_id, build, lambda _message: None)
