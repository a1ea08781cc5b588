"""The scheduler thread of a speech worker: synthesises requests chunk by chunk, in turns.

Every admitted request (a :class:`SpeechJob`: its text already cut into
phoneme chunks on the input thread, :mod:`worker.speech.text`) joins a
round: each loop turn synthesises the next chunk of the request at the
front and moves it to the back, so requests share the worker chunk by chunk
(sentence by sentence) and a long input never holds a short one back for
more than one chunk of its own. New requests, aborts and deadlines are
checked between chunks, by the shared loop
(:class:`~worker.batch_loop.loop.BatchLoop`, which also ends requests on
shutdown or failure); this module supplies the round and its step.

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

import time
from dataclasses import dataclass, field

import numpy as np

from shared.protocol import RequestOutput, StepOutputs
from worker.batch_loop.loop import BatchLoop
from worker.messages import Counters, Deferred
from worker.speech.encode import AudioEncoder
from worker.speech.model import SpeechModel


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


class SpeechScheduler(BatchLoop[_Live]):
    """Runs ``model`` on the scheduler thread through the shared loop
    (:class:`~worker.batch_loop.loop.BatchLoop`: ``emit`` and
    ``sample_memory`` as there); see the module docstring. The order of
    ``_live`` is the round: the request at the front synthesises next.
    """

    _model: SpeechModel
    job_type = SpeechJob
    name = "speech"
    work = "synthesising"

    def warm_up(self) -> None:
        """Synthesise a few phonemes once so kernels are built before the
        worker says Ready."""
        self._model.synthesize("hˈI", self._model.voices[0], 1.0)

    def _count(self, counters: Counters) -> None:
        counters.waiting = sum(1 for live in self._live.values() if live.next_chunk == 0)

    def _open(self, job: SpeechJob) -> _Live:
        encoder = AudioEncoder(job.response_format, self._model.sample_rate, job.stream)
        return _Live(job, encoder, sum(len(c) for c in job.chunks))

    def _send_ended(self, lives: list[_Live], reason: str, kind: str | None, message: str | None) -> None:
        """One terminal each, sent after whatever audio of theirs is already
        queued for the output thread."""
        for live in lives:
            self._emit(_terminal_error(live, reason, kind, message))

    # -- synthesis ----------------------------------------------------------------

    def _step(self) -> None:
        request_id, live = next(iter(self._live.items()))
        job = live.job
        started = time.perf_counter()
        if live.next_chunk == 0:
            live.queue_seconds = max(0.0, time.monotonic() - job.received) if job.received else None
        samples = self._model.synthesize(job.chunks[live.next_chunk], job.voice, job.speed)
        live.next_chunk += 1
        live.samples += samples.size
        last = live.next_chunk == len(job.chunks)
        c = self.counters
        c.steps += 1
        c.step_seconds += time.perf_counter() - started
        c.max_batch_seen = max(c.max_batch_seen, len(self._live))
        del self._live[request_id]
        if last:
            c.requests_finished += 1
            c.prompt_tokens += live.phonemes
        else:
            self._live[request_id] = live  # to the back of the round
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
