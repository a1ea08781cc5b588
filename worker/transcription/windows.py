"""One transcription request's walk over its audio, 30-second window by window.

Whisper reads 30 s windows; where the next window starts depends on the
timestamps the previous one produced, so one file is a sequence of
decodes. :class:`Transcription` holds one request's place in that
sequence: the window to decode next (:meth:`Transcription.window`), the
decoding options it needs (:meth:`Transcription.options`, equal options
can share one batched decode with other requests), and what a decoded
window does (:meth:`Transcription.take`): retry at the next temperature,
skip a silent window, or cut the tokens into segments (with words when
asked) and move on.

The rules are those of the library's own ``Model.generate`` (OpenAI's
Whisper transcription loop) with ``condition_on_previous_text=False`` (a
window is not prompted with the previous window's text: that keeps the
decoding options of the requests equal so they batch, and avoids the
repetition loops conditioning causes), ``clip_timestamps="0"`` and no
hallucination-silence threshold; the client's ``prompt`` prompts the
first window, as there; each window is decoded with the timestamp rules
of :mod:`worker.transcription.decoding` (bounded by :meth:`Transcription.last_stamp`).
:mod:`tests.test_transcription_model` checks the result equals
``Model.generate`` with those settings and those rules in place of the
library's.

Scheduler thread only (MLX).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
"""Temperatures tried in turn when a request's temperature is 0 and a
window's decode looks failed (OpenAI: "the model will use log probability
to automatically increase the temperature")."""

COMPRESSION_RATIO_THRESHOLD = 2.4
LOGPROB_THRESHOLD = -1.0
NO_SPEECH_THRESHOLD = 0.6
PREPEND_PUNCTUATIONS = "\"'\u201c\u00bf([{-"
APPEND_PUNCTUATIONS = "\"'.\u3002,\uff0c!\uff01?\uff1f:\uff1a\u201d)]}\u3001"


@dataclass
class Transcription:
    """One request's state (see the module docstring).

    ``mel`` is the whole file's log-mel spectrogram with 30 s of padding
    after it (frames x mels); ``content_frames`` the frames of real audio;
    ``temperatures`` the temperatures to try for each window, in order;
    ``words``: add word timestamps to each segment; ``mel_ctx`` the
    encoder's positions per window (the model's ``n_audio_ctx``).
    """

    mel: Any
    content_frames: int
    language: str
    task: str
    prompt_tokens: list[int]
    temperatures: tuple[float, ...]
    words: bool
    seek: int = 0
    attempt: int = 0
    segments: list[dict] = field(default_factory=list)
    all_tokens: list[int] = field(default_factory=list)
    prompt_reset_since: int = 0
    last_speech_timestamp: float = 0.0
    mel_ctx: int = 1500

    def __post_init__(self) -> None:
        self.all_tokens = list(self.prompt_tokens)

    @property
    def done(self) -> bool:
        """Whether every window has been read."""
        return self.seek >= self.content_frames

    @property
    def duration(self) -> float:
        """Seconds of audio."""
        return self._seconds(self.content_frames)

    def segment_size(self) -> int:
        """Frames of audio in the current window."""
        from mlx_audio.stt.models.whisper.audio import N_FRAMES

        return min(N_FRAMES, self.content_frames - self.seek)

    def last_stamp(self) -> int:
        """The largest timestamp index inside the current window's audio
        (a timestamp is two frames, 0.02 s)."""
        from mlx_audio.stt.models.whisper.audio import N_FRAMES

        return self.segment_size() // (N_FRAMES // self.mel_ctx)

    def window(self, dtype: Any) -> Any:
        """The current window's mel (padded with zeros to 30 s), in ``dtype``."""
        from mlx_audio.stt.models.whisper.audio import N_FRAMES, pad_or_trim

        return pad_or_trim(self.mel[self.seek : self.seek + self.segment_size()], N_FRAMES, axis=-2).astype(dtype)

    def options(self, fp16: bool) -> Any:
        """The library's ``DecodingOptions`` for the current window: requests
        whose options are equal are decoded in one batch."""
        from mlx_audio.stt.models.whisper.decoding import DecodingOptions

        return DecodingOptions(
            task=self.task,
            language=self.language,
            temperature=self.temperatures[self.attempt],
            prompt=list(self.all_tokens[self.prompt_reset_since :]),
            without_timestamps=False,
            fp16=fp16,
        )

    def take(self, result: Any, window: Any, model: Any, tokenizer: Any) -> list[dict] | None:
        """Apply the decode ``result`` of the current ``window``: None when the
        window must be decoded again at the next temperature, else the new
        segments it produced (possibly none: silence), the place moved on."""
        if self._failed(result) and self.attempt + 1 < len(self.temperatures):
            self.attempt += 1
            return None
        self.attempt = 0
        size = self.segment_size()
        if result.no_speech_prob > NO_SPEECH_THRESHOLD and not result.avg_logprob > LOGPROB_THRESHOLD:
            self.seek += size
            return []
        start = self.seek
        new, single_ending = self._cut(result, tokenizer, size)
        if self.words:
            self._add_words(new, window, _Encoded(model, result.audio_features), tokenizer, size, start, single_ending)
        for segment in new:
            if segment["start"] == segment["end"] or not segment["text"].strip():
                segment["text"], segment["tokens"], segment["words"] = "", [], []
        if self.words:
            in_time_order(new, self.segments[-1]["end"] if self.segments else 0.0, self._seconds(start + size))
        first = len(self.segments)
        new = [{"id": first + i, **segment} for i, segment in enumerate(new)]
        self.segments.extend(new)
        self.all_tokens.extend(token for segment in new for token in segment["tokens"])
        self.prompt_reset_since = len(self.all_tokens)
        return new

    def _seconds(self, frames: int) -> float:
        """The time of mel frame ``frames``."""
        from mlx_audio.stt.models.whisper.audio import HOP_LENGTH, SAMPLE_RATE

        return frames * HOP_LENGTH / SAMPLE_RATE

    def text(self, tokenizer: Any) -> str:
        """The whole transcript so far (the prompt left out), without the
        space Whisper's first token starts with (OpenAI's answers have none)."""
        return tokenizer.decode(self.all_tokens[len(self.prompt_tokens) :]).strip()

    def _failed(self, result: Any) -> bool:
        """Whether a decode counts as failed (too repetitive or too unlikely,
        unless it is silence)."""
        failed = result.compression_ratio > COMPRESSION_RATIO_THRESHOLD or result.avg_logprob < LOGPROB_THRESHOLD
        if result.no_speech_prob > NO_SPEECH_THRESHOLD and result.avg_logprob < LOGPROB_THRESHOLD:
            failed = False
        return failed

    def _cut(self, result: Any, tokenizer: Any, size: int) -> tuple[list[dict], bool]:
        """The segments of a window's tokens (the place moved to the next
        window's start), and whether the window ended on a single timestamp
        (no speech after it)."""
        from mlx_audio.stt.models.whisper.audio import HOP_LENGTH, N_FRAMES, SAMPLE_RATE

        stride = N_FRAMES // self.mel_ctx
        precision = stride * HOP_LENGTH / SAMPLE_RATE
        offset = self.seek * HOP_LENGTH / SAMPLE_RATE
        tokens = np.array(result.tokens, dtype=np.int64)
        stamps = tokens >= tokenizer.timestamp_begin
        single_ending = stamps[-2:].tolist() == [False, True]
        consecutive = (np.where(np.logical_and(stamps[:-1], stamps[1:]))[0] + 1).tolist()
        segments = []
        if consecutive:
            if single_ending:
                consecutive.append(len(tokens))
            last = 0
            for cut in consecutive:
                piece = tokens[last:cut]
                start = int(piece[0]) - tokenizer.timestamp_begin
                end = int(piece[-1]) - tokenizer.timestamp_begin
                segments.append(
                    self._segment(offset + start * precision, offset + end * precision, piece, result, tokenizer)
                )
                last = cut
            if single_ending:
                self.seek += size
            else:
                self.seek += (int(tokens[last - 1]) - tokenizer.timestamp_begin) * stride
        else:
            duration = size * HOP_LENGTH / SAMPLE_RATE
            found = tokens[stamps.nonzero()[0]]
            if len(found) and int(found[-1]) != tokenizer.timestamp_begin:
                duration = (int(found[-1]) - tokenizer.timestamp_begin) * precision
            segments.append(self._segment(offset, offset + duration, tokens, result, tokenizer))
            self.seek += size
        return segments, single_ending

    def _segment(self, start: float, end: float, tokens: np.ndarray, result: Any, tokenizer: Any) -> dict:
        """One segment in OpenAI's ``verbose_json`` shape (words added later)."""
        ids = [int(t) for t in tokens]
        return {
            "seek": self.seek,
            "start": float(start),
            "end": float(end),
            "text": tokenizer.decode([t for t in ids if t < tokenizer.eot]),
            "tokens": ids,
            "temperature": float(result.temperature),
            "avg_logprob": float(result.avg_logprob),
            "compression_ratio": float(result.compression_ratio),
            "no_speech_prob": float(result.no_speech_prob),
        }

    def _add_words(
        self, segments: list[dict], window: Any, model: Any, tokenizer: Any, size: int, start: int, single_ending: bool
    ) -> None:
        """Word timestamps for ``segments`` (the library's cross-attention
        alignment); like the library, a window that ended inside speech
        resumes at the last word's end."""
        from mlx_audio.stt.models.whisper.audio import FRAMES_PER_SECOND, HOP_LENGTH, SAMPLE_RATE
        from mlx_audio.stt.models.whisper.timing import add_word_timestamps

        offset = start * HOP_LENGTH / SAMPLE_RATE
        add_word_timestamps(
            segments=segments,
            model=model,
            tokenizer=tokenizer,
            mel=window,
            num_frames=size,
            prepend_punctuations=PREPEND_PUNCTUATIONS,
            append_punctuations=APPEND_PUNCTUATIONS,
            last_speech_timestamp=self.last_speech_timestamp,
        )
        last_end = _last_end(segments)
        if not single_ending and last_end is not None and last_end > offset:
            self.seek = round(last_end * FRAMES_PER_SECOND)
        if last_end is not None:
            self.last_speech_timestamp = last_end


class _Encoded:
    """``model`` with one window already encoded (the decode's
    ``audio_features``): the word alignment's forward pass reuses them
    instead of running the encoder on the window again (the encoder is
    most of a window's time; the library's own loop encodes twice)."""

    def __init__(self, model: Any, features: Any) -> None:
        self._model = model
        self._features = features

    def forward_with_cross_qk(self, mel: Any, tokens: Any) -> tuple[Any, Any]:
        """The library's ``forward_with_cross_qk`` on the kept features (``mel`` unused)."""
        logits, _, cross_qk = self._model.decoder(tokens, self._features[None])
        return logits, cross_qk

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


def _last_end(segments: list[dict]) -> float | None:
    """The end of the last word of ``segments``, else of the last segment
    (None: no segments)."""
    fallback = segments[-1]["end"] if segments else None
    return next((w["end"] for s in reversed(segments) for w in reversed(s.get("words", []))), fallback)


def in_time_order(segments: list[dict], floor: float, ceiling: float) -> None:
    """Move the times of one window's ``segments`` and their words, in
    place, so that each starts at or after the end of the one before it
    (``floor``: the end of the previous window's last segment), every word
    lies inside its segment, nothing ends before it starts, and nothing
    ends after ``ceiling`` (the end of the window's audio).

    Why: the segments' own timestamps already obey Whisper's rules
    (:mod:`worker.transcription.decoding`), but the library's word
    alignment then moves segment and word edges by heuristics (a first
    word after a pause is shortened to twice the median word, a segment
    takes its first word's start), which can put a start before the
    previous end; subtitle players refuse such cues. The window walk
    (where the next window starts) is decided before this, as in the
    library.
    """
    for segment in segments:
        segment["start"] = min(max(segment["start"], floor), ceiling)
        floor = segment["start"]
        for word in segment.get("words") or []:
            word["start"] = min(max(word["start"], floor), ceiling)
            word["end"] = min(max(word["end"], word["start"]), ceiling)
            floor = word["end"]
        segment["end"] = min(max(segment["end"], floor), ceiling)
        floor = segment["end"]
