"""The scheduler thread of a transcription worker: a round scheduler over 30-second windows.

Whisper reads a file as a sequence of 30 s windows, each depending on
where the previous one ended, so a long file is many decodes in a row.
To keep one long file from holding up every other request, the scheduler
works in rounds: each round takes the current window of every request in
flight (one window each), groups the windows whose decoding options are
equal (language, task, prompt, temperature: :meth:`Transcription.options`),
and decodes each group as one batch
(:func:`~worker.transcription.decoding.decode_windows`: one encoder pass
and one lockstep loop for the whole group, at most ``max_batch_size``
windows per decode). Each request then applies its own
result (:meth:`Transcription.take`: its segments, its next window, or a
retry at the next temperature) and gets one output holding that window's
text. A request of one window finishes after its first round, however
long the files beside it are; requests that arrive during a round join
the next one.

New requests are prepared at the start of a round: their log-mel
spectrogram is computed (the whole file at once, as the library does), and
the language of those that named none is detected, in one batch, on their
first window (English-only models: ``english``).

The inbox, aborts, deadlines, shutdown and failure handling are the shared
loop's (:class:`~worker.batch_loop.loop.BatchLoop`); a round is its step.
Every admitted request ends with exactly one terminal output: its
transcript, an ``abort`` (client gone, shutdown), a ``timeout`` error past
its deadline, an ``invalid_request`` error (a language the model does not
know, a translation asked of an English-only model), or an ``internal``
error if decoding fails (the failure then escapes
:meth:`TranscriptionScheduler.run` and the worker exits to be replaced).

Threads: :meth:`run` and :meth:`warm_up` run on the scheduler thread, the
only one touching MLX; :meth:`submit` may be called from any thread.
``counters`` is written here and read by the output thread.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from shared.protocol import RequestOutput, StepOutputs, Transcript, TranscriptSegment, TranscriptWord
from worker.batch_loop.loop import BatchLoop
from worker.transcription.decoding import decode_windows
from worker.transcription.model import WhisperModel
from worker.transcription.windows import FALLBACK_TEMPERATURES, Transcription


@dataclass
class TranscribeJob:
    """A decoded upload (built on the input thread): 16 kHz mono
    ``samples`` and the request's options; ``deadline`` a
    ``time.monotonic()`` instant or None; ``received`` when the worker got
    it; ``fallback``: a ``temperature`` of 0 falls back to higher ones
    where a window's decode looks failed (OpenAI's rule; False: greedy
    only)."""

    request_id: str
    samples: np.ndarray
    task: str = "transcribe"
    language: str | None = None
    prompt: str | None = None
    temperature: float = 0.0
    words: bool = False
    deadline: float | None = None
    received: float = 0.0
    fallback: bool = True


@dataclass
class _Live:
    """An admitted request: its job and, once prepared, its windows."""

    job: TranscribeJob
    state: Transcription | None = None
    tokenizer: Any = None
    queue_seconds: float | None = None
    spoken: bool = False
    """Whether a window's text was sent (the first one goes without its
    leading space, as the transcript's text does)."""


class TranscriptionError(ValueError):
    """A request the model cannot serve; ``str()`` is the client-facing reason."""


class TranscriptionScheduler(BatchLoop[_Live]):
    """Runs ``model`` on the scheduler thread through the shared loop
    (:class:`~worker.batch_loop.loop.BatchLoop`: ``emit``,
    ``max_batch_size``, the most windows decoded together, and
    ``sample_memory`` as there); see the module docstring.
    """

    _model: WhisperModel
    job_type = TranscribeJob
    name = "transcription"
    work = "transcribing"

    def __init__(self, model: WhisperModel, emit: Callable[[object], None], **options: Any) -> None:
        super().__init__(model, emit, **options)
        self.rounds: list[list[str]] = []
        """The requests of each group decoded so far, in order (kept for the
        last 64 decodes: what shared a decode, for tests and logs)."""

    def warm_up(self) -> None:
        """Transcribe half a second of silence once so kernels are built
        before the worker says Ready."""
        live = _Live(TranscribeJob("warm-up", np.zeros(8000, np.float32), language=None))
        self._prepare([live])
        state = live.state
        assert state is not None
        decode_windows(
            self._model.model,
            state.window(self._model.model.dtype)[None],
            state.options(self._model.fp16),
            [state.last_stamp()],
        )

    def _open(self, job: TranscribeJob) -> _Live:
        return _Live(job)

    # -- rounds -----------------------------------------------------------------

    def _step(self) -> bool:
        """One window of every request in flight (see the module docstring);
        False when a ``Stop`` arrived between decodes."""
        fresh = [live for live in self._live.values() if live.state is None]
        if fresh:
            self._prepare(fresh)
        groups: dict[Any, list[str]] = {}
        for request_id, live in self._live.items():
            assert live.state is not None
            key = repr(live.state.options(self._model.fp16))
            groups.setdefault(key, []).append(request_id)
        for members in groups.values():
            for start in range(0, len(members), self._max_batch):
                batch = [r for r in members[start : start + self._max_batch] if r in self._live]
                if batch:
                    self._decode(batch)
                if not self._drain(block=False):
                    return False
                self._expire(time.monotonic())
        return True

    def _prepare(self, fresh: list[_Live]) -> None:
        """Mel spectrograms, prompts and languages of newly admitted requests
        (a request the model cannot serve is ended here)."""
        from mlx_audio.stt.models.whisper.audio import N_FRAMES, N_SAMPLES, log_mel_spectrogram, pad_or_trim
        from mlx_audio.stt.models.whisper.decoding import detect_language

        model = self._model.model
        now = time.monotonic()
        detect: list[_Live] = []
        for live in list(fresh):
            job = live.job
            live.queue_seconds = max(0.0, now - job.received) if job.received else None
            try:
                language = self._language(job)
            except TranscriptionError as exc:
                if job.request_id in self._live:
                    self._end([job.request_id], "error", "invalid_request", str(exc))
                fresh.remove(live)
                continue
            mel = log_mel_spectrogram(job.samples, n_mels=model.dims.n_mels, padding=N_SAMPLES)
            live.state = Transcription(
                mel=mel,
                content_frames=mel.shape[0] - N_FRAMES,
                language=language or "",
                task=job.task,
                prompt_tokens=[],
                temperatures=FALLBACK_TEMPERATURES if job.temperature == 0 and job.fallback else (job.temperature,),
                words=job.words,
                mel_ctx=model.dims.n_audio_ctx,
            )
            if language is None:
                detect.append(live)
        if detect:
            windows = mx_stack([pad_or_trim(live.state.mel, N_FRAMES, axis=-2).astype(model.dtype) for live in detect])  # type: ignore[union-attr]
            _, probabilities = detect_language(model, windows, self._model.tokenizer(None, "transcribe"))
            for live, probs in zip(detect, probabilities):
                live.state.language = max(probs, key=probs.get)  # type: ignore[union-attr]
        for live in fresh:
            state = live.state
            assert state is not None
            live.tokenizer = self._model.tokenizer(state.language, state.task)
            if live.job.prompt:
                state.prompt_tokens = live.tokenizer.encode(" " + live.job.prompt.strip())
                state.all_tokens = list(state.prompt_tokens)

    def _language(self, job: TranscribeJob) -> str | None:
        """The language to decode ``job`` in (None: detect it).

        Raises:
            TranscriptionError: a language the model does not know, or a
                translation asked of an English-only model.
        """
        from mlx_audio.stt.models.whisper.tokenizer import LANGUAGES, TO_LANGUAGE_CODE

        if not self._model.multilingual:
            if job.task == "translate":
                raise TranscriptionError("this model is English-only: it cannot translate (use a multilingual Whisper)")
            if job.language not in (None, "en"):
                raise TranscriptionError(f"this model is English-only: it cannot transcribe language {job.language!r}")
            return "en"
        if job.language is None:
            return None
        code = job.language.lower()
        code = TO_LANGUAGE_CODE.get(code, code)
        if code not in list(LANGUAGES)[: self._model.model.num_languages]:
            raise TranscriptionError(f"language {job.language!r} is not one this model knows (ISO-639-1 codes)")
        return code

    def _decode(self, batch: list[str]) -> None:
        """Decode the current window of each request of ``batch`` (equal
        options) as one batch and apply the results."""
        import mlx.core as mx

        started = time.perf_counter()
        model = self._model.model
        lives = [self._live[r] for r in batch]
        states = [live.state for live in lives]
        windows = [state.window(model.dtype) for state in states]  # type: ignore[union-attr]
        results = decode_windows(
            model,
            mx.stack(windows),
            states[0].options(self._model.fp16),  # type: ignore[union-attr]
            [state.last_stamp() for state in states],  # type: ignore[union-attr]
        )
        self.rounds = (self.rounds + [list(batch)])[-64:]
        outputs = []
        finished = []
        for live, window, result in zip(lives, windows, results):
            state = live.state
            assert state is not None
            new = state.take(result, window, model, live.tokenizer)
            if new is None:
                continue
            text = live.tokenizer.decode([t for s in new for t in s["tokens"] if t < live.tokenizer.eot])
            if not live.spoken:
                text = text.lstrip()
                live.spoken = bool(text)
            outputs.append(RequestOutput(request_id=live.job.request_id, text=text, queue_seconds=live.queue_seconds))
            live.queue_seconds = None
            if state.done:
                finished.append(live)
        c = self.counters
        c.steps += 1
        c.step_seconds += time.perf_counter() - started
        c.max_batch_seen = max(c.max_batch_seen, len(batch))
        for live in finished:
            self._live.pop(live.job.request_id)
            outputs.append(self._transcript(live))
            c.requests_finished += 1
            c.audio_seconds_in += live.state.duration  # type: ignore[union-attr]
        if outputs:
            self._emit(StepOutputs(step=c.steps, outputs=outputs))

    def _transcript(self, live: _Live) -> RequestOutput:
        """The terminal output of a finished request."""
        from mlx_audio.stt.models.whisper.tokenizer import LANGUAGES

        state = live.state
        assert state is not None
        segments = [
            TranscriptSegment(
                id=s["id"],
                seek=s["seek"],
                start=round(s["start"], 3),
                end=round(s["end"], 3),
                text=s["text"],
                tokens=s["tokens"],
                temperature=s["temperature"],
                avg_logprob=finite(s["avg_logprob"]),
                compression_ratio=finite(s["compression_ratio"]),
                no_speech_prob=finite(s["no_speech_prob"]),
                words=[
                    TranscriptWord(word=w["word"], start=round(float(w["start"]), 3), end=round(float(w["end"]), 3))
                    for w in s.get("words") or []
                ],
            )
            for s in state.segments
        ]
        language = "english" if state.task == "translate" else LANGUAGES.get(state.language, state.language)
        return RequestOutput(
            request_id=live.job.request_id,
            finish_reason="stop",
            transcript=Transcript(
                text=state.text(live.tokenizer),
                language=language,
                duration=round(state.duration, 3),
                segments=segments,
            ),
        )


def finite(value: float) -> float:
    """``value`` as a JSON-safe number: NaN as 0, infinities as the largest
    float of their sign (a degenerate decode can yield them)."""
    if math.isnan(value):
        return 0.0
    if math.isinf(value):
        return math.copysign(sys.float_info.max, value)
    return float(value)


def mx_stack(arrays: list[Any]) -> Any:
    """``mx.stack`` (imported here: this module is imported before MLX is needed)."""
    import mlx.core as mx

    return mx.stack(arrays)
