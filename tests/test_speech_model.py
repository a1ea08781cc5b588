"""The speech worker's pieces in-process: a tiny random Kokoro (built from
mlx-audio's own classes, :mod:`tests.tiny_kokoro`) synthesised by mlxd
(:mod:`worker.speech.model`, its scheduler interleaving two requests) and by
mlx-audio's own ``KokoroPipeline`` on the same phonemes, compared sample for
sample; every response format encoded and decoded back; the phoneme
chunking and the refusals of the input side.

Needs the ``speech`` extra (mlx-audio, soundfile, misaki, espeakng-loader).
"""

from __future__ import annotations

import fcntl
import io
import os
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mlx_audio")
pytest.importorskip("soundfile")
pytest.importorskip("misaki")

import soundfile as sf  # noqa: E402

from tests.hub_watch import assert_no_hub_and_no_environment_change, watching_the_hub  # noqa: E402
from tests.tiny_kokoro import build_tiny_kokoro  # noqa: E402
from worker.messages import Abort, Deferred, Stop  # noqa: E402
from worker.speech.encode import FORMATS, AudioEncoder, clean, missing_encoder, pcm16  # noqa: E402
from worker.speech.model import SYNTHESIS_SEED, SpeechInputError  # noqa: E402
from worker.speech.text import Phonemizer, SpeechTextError, split_phonemes  # noqa: E402

RATE = 24000


def tiny_kokoro_dir(tmp_path_factory) -> Path:
    """The tiny Kokoro of this test session, built once (~2 CPU seconds and
    ~210 MB of weights, mostly the decoder's fixed 1024-channel
    convolutions) and shared by every module that asks: under the session's
    base temporary directory, which xdist workers share (each has its own
    ``popen-gwN`` under it), behind a lock so one process builds while the
    others wait for it."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    with open(base / "tiny-kokoro.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return build_tiny_kokoro(base / "tiny-kokoro")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="module")
def kokoro_dir(tmp_path_factory):
    return tiny_kokoro_dir(tmp_path_factory)


@pytest.fixture(scope="module")
def ours(kokoro_dir):
    from worker.speech.model import load_speech_model

    return load_speech_model(str(kokoro_dir))


_PIPELINES: dict[Path, object] = {}
"""mlx-audio's ``KokoroPipeline`` per model directory, loaded once per process."""

_LIBRARY_AUDIO: dict[tuple[Path, str, str, float], np.ndarray] = {}
"""The library's samples per (model directory, phonemes, voice, speed):
each chunk is synthesised once per process, whichever test compares it."""


def library_audio(kokoro_dir, phonemes: list[str], voice: str, speed: float = 1.0) -> list[np.ndarray]:
    """mlx-audio's own pipeline on ``phonemes`` (one result per chunk),
    seeded as mlxd seeds each chunk; ``voice`` is a pack's path, or paths
    joined by commas for a blend (the pipeline's ``load_voice`` means them).
    Its English G2P (misaki.en, spaCy) is not installed, so the pipeline is
    built for an espeak language; its G2P is unused since it gets phonemes.
    The model is loaded by the library's own loader, apart from mlxd's, and
    results are cached (read-only arrays): the pipeline is deterministic
    for a given chunk, voice and speed."""
    import mlx.core as mx
    from mlx_audio.tts.models.kokoro.pipeline import KokoroPipeline
    from mlx_audio.tts.utils import load_model

    directory = Path(kokoro_dir)
    pipeline = _PIPELINES.get(directory)
    if pipeline is None:
        model = load_model(directory)
        pipeline = _PIPELINES[directory] = KokoroPipeline(
            lang_code="e", model=model, repo_id="offline/tiny-kokoro", model_path=str(directory)
        )
    out = []
    for ps in phonemes:
        key = (directory, ps, voice, float(speed))
        audio = _LIBRARY_AUDIO.get(key)
        if audio is None:
            mx.random.seed(SYNTHESIS_SEED)
            (result,) = list(pipeline.generate_from_tokens(ps, voice=voice, speed=speed))
            audio = np.asarray(result.audio, dtype=np.float32).reshape(-1).copy()
            audio.flags.writeable = False
            _LIBRARY_AUDIO[key] = audio
        out.append(audio)
    return out


def test_synthesis_equals_the_library_pipeline(ours, kokoro_dir):
    """Each chunk mlxd synthesises equals mlx-audio's pipeline output for the
    same phonemes, voice pack and speed, sample for sample (speed changes it)."""
    chunks = Phonemizer(ours.max_phonemes).chunks("Hi. Good day.", "af_tiny")
    assert len(chunks) == 2
    voice = str(kokoro_dir / "voices" / "af_tiny.safetensors")
    reference = library_audio(kokoro_dir, chunks, voice, speed=1.3)
    mine = [ours.synthesize(ps, "af_tiny", 1.3) for ps in chunks]
    for a, b in zip(mine, reference):
        assert a.size > 0 and np.array_equal(a, b)
    assert mine[0].size != ours.synthesize(chunks[0], "af_tiny", 1.0).size  # speed is a model input


def test_scheduler_interleaves_requests_and_matches_the_library(ours, kokoro_dir):
    """Two requests admitted together share the worker chunk by chunk: the
    one-chunk request ends after the long one's first chunk, not after all
    of it; each streamed pcm output is the library's audio of that chunk."""
    from worker.speech.scheduler import SpeechJob, SpeechScheduler

    phonemizer = Phonemizer(ours.max_phonemes)
    long_chunks = phonemizer.chunks("Hi. Hey. Yo.", "am_tiny")
    short_chunks = phonemizer.chunks("Ok.", "af_tiny")
    sent: list = []
    done = threading.Event()

    def emit(item):
        if isinstance(item, Deferred):
            item = item.build()
        if item is None:
            return
        sent.extend(item.outputs)
        if sum(1 for o in sent if o.finish_reason) == 2:
            done.set()

    scheduler = SpeechScheduler(ours, emit)
    scheduler.submit(SpeechJob("long", long_chunks, "am_tiny", 1.0, "pcm", True))
    scheduler.submit(SpeechJob("short", short_chunks, "af_tiny", 1.0, "pcm", True))
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    try:
        assert done.wait(300), [(o.request_id, o.finish_reason) for o in sent]
    finally:  # stopped on every path, so no scheduler thread outlives the test
        scheduler.submit(Stop())
        thread.join(60)
    assert not thread.is_alive(), "the scheduler thread did not stop"
    order = [o.request_id for o in sent]
    assert order == ["long", "short", "long", "long"], order
    assert [o.finish_reason for o in sent] == [None, "stop", None, "stop"]
    for request_id, chunks, voice in (("long", long_chunks, "am_tiny"), ("short", short_chunks, "af_tiny")):
        pack = str(kokoro_dir / "voices" / f"{voice}.safetensors")
        expected = b"".join(pcm16(a) for a in library_audio(kokoro_dir, chunks, pack))
        assert b"".join(o.audio for o in sent if o.request_id == request_id) == expected
        outputs = [o for o in sent if o.request_id == request_id]
        assert sum(o.audio_seconds for o in outputs) == pytest.approx(len(expected) / 2 / RATE)


def test_scheduler_abort_ends_a_request_once(ours):
    """An aborted request gets one ``abort`` output and nothing after it:
    the abort, queued from the output side as the first chunk's audio comes
    out, ends the request before its next chunk."""
    from worker.speech.scheduler import SpeechJob, SpeechScheduler

    sent: list = []
    ended = threading.Event()

    def emit(item):
        message = item.build() if isinstance(item, Deferred) else item
        if message is None:
            return
        sent.extend(message.outputs)
        if len(sent) == 1:  # the first chunk's audio is out: the client leaves, queued before the next turn
            scheduler.submit(Abort(["a"]))
        if any(o.finish_reason for o in message.outputs):
            ended.set()

    scheduler = SpeechScheduler(ours, emit)
    chunks = Phonemizer(ours.max_phonemes).chunks("Hi. Hi. Hi.", "af_tiny")
    assert len(chunks) == 3
    scheduler.submit(SpeechJob("a", chunks, "af_tiny", 1.0, "mp3", True))
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    try:
        assert ended.wait(120), f"no terminal output within 120 s: {sent}"
    finally:  # stopped on every path, so no scheduler thread outlives the test
        scheduler.submit(Stop())
        thread.join(60)
    assert not thread.is_alive(), "the scheduler thread did not stop"
    assert [o.finish_reason for o in sent] == [None, "abort"], [(o.finish_reason, len(o.audio)) for o in sent]
    assert scheduler.counters.requests_aborted == 1 and scheduler.counters.steps == 1


def tone(seconds: float, rate: int = RATE) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.4 * np.sin(2 * np.pi * 220 * t) + 0.2 * np.sin(2 * np.pi * 330 * t)).astype(np.float32)


def ffmpeg_decode(data: bytes, fmt: str) -> np.ndarray:
    """``data`` decoded by the ffmpeg program to 16-bit samples at 24 kHz."""
    done = subprocess.run(
        ["ffmpeg", "-nostdin", "-loglevel", "error", "-f", fmt, "-i", "pipe:0", "-f", "s16le", "-ar", str(RATE)]
        + ["-ac", "1", "pipe:1"],
        input=data,
        capture_output=True,
        check=True,
        timeout=120,
    )
    return np.frombuffer(done.stdout, dtype="<i2")


READ_BY_FFMPEG = {("aac", False): "aac", ("aac", True): "aac", ("mp3", True): "mp3", ("flac", True): "flac"}
"""Answers read back with ffmpeg: aac (libsndfile has no AAC), and streamed
mp3 and flac, whose headers say "length unknown", which libsndfile's reader
cannot take (players and ffmpeg do)."""


def decode(data: bytes, fmt: str, streamed: bool) -> np.ndarray:
    """The 16-bit samples of an encoded answer: raw pcm as is, the formats of
    :data:`READ_BY_FFMPEG` by ffmpeg, the rest by libsndfile."""
    if fmt == "pcm":
        return np.frombuffer(data, dtype="<i2")
    if (fmt, streamed) in READ_BY_FFMPEG:
        return ffmpeg_decode(data, READ_BY_FFMPEG[(fmt, streamed)])
    samples, rate = sf.read(io.BytesIO(data), dtype="int16")
    assert rate == RATE
    return samples.reshape(-1)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_decodes_back(fmt, streamed):
    """Encode three chunks (whole file or streamed), decode what came out:
    lossless formats give the 16-bit samples exactly, lossy ones the same
    length (within the codec's padding) and the same tone; a whole file
    comes only from ``finish``, a stream's bytes from each ``add``."""
    if fmt == "aac" and shutil.which("ffmpeg") is None:
        assert "ffmpeg" in (missing_encoder("aac") or "")
        pytest.skip("no ffmpeg: aac is refused, naming it")
    if (fmt, streamed) in READ_BY_FFMPEG and shutil.which("ffmpeg") is None:
        pytest.skip("read back with ffmpeg, which is not installed")
    parts = [tone(0.3), tone(0.25), tone(0.2)]
    encoder = AudioEncoder(fmt, RATE, stream=streamed)
    pieces = [encoder.add(p) for p in parts]
    assert any(pieces) == streamed, "a whole file comes only from finish()"
    data = b"".join(pieces) + encoder.finish()
    back = decode(data, fmt, streamed)
    want = np.frombuffer(pcm16(np.concatenate(parts)), dtype="<i2")
    if fmt in ("wav", "flac", "pcm"):
        assert np.array_equal(back, want)
        return
    # codec padding: a streamed aac is one ADTS run per chunk, each with its priming and last-frame padding
    slack = 2048 * len(parts) if fmt == "aac" and streamed else 0.1 * RATE
    assert abs(back.size - want.size) < slack, (back.size, want.size)
    spectrum = np.abs(np.fft.rfft(back[: want.size] if back.size >= want.size else back))
    peak_hz = np.argmax(spectrum) * RATE / (2 * (spectrum.size - 1))
    assert abs(peak_hz - 220) < 15, peak_hz


def test_streamed_wav_and_flac_say_unknown_length():
    """A streamed wav's header gives unknown sizes; a streamed flac's
    STREAMINFO gives no total (its first bytes, as sent, are never rewritten)."""
    wav = AudioEncoder("wav", RATE, stream=True)
    head = wav.add(tone(0.1))
    assert head[4:8] == b"\xff\xff\xff\xff" and head[40:44] == b"\xff\xff\xff\xff"
    flac = AudioEncoder("flac", RATE, stream=True)
    first = flac.add(tone(0.5))
    rest = flac.add(tone(0.5)) + flac.finish()
    assert first[:4] == b"fLaC" and first[22:26] == bytes(4) and first[21] & 0x0F == 0
    if shutil.which("ffmpeg") is not None:
        assert ffmpeg_decode(first + rest, "flac").size == RATE


def test_nan_and_overflow_are_cleaned_before_encoding():
    """NaN and out-of-range samples (a random model makes them) are made
    safe before any encoder sees them: libsndfile's MP3 encoder would abort
    the process on NaN."""
    bad = np.array([np.nan, np.inf, -np.inf, 3.0, -3.0, 0.5], dtype=np.float32)
    assert clean(bad).tolist() == [0.0, 1.0, -1.0, 1.0, -1.0, 0.5]
    encoder = AudioEncoder("mp3", RATE, stream=False)
    encoder.add(np.concatenate([tone(0.2), np.full(2400, np.nan, np.float32)]))
    assert sf.read(io.BytesIO(encoder.finish()))[0].size > 0


def test_missing_encoder_names_the_missing_program(monkeypatch):
    """aac without the ffmpeg program is refused, naming it."""
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert "ffmpeg" in missing_encoder("aac")
    assert missing_encoder("wav") is None and missing_encoder("pcm") is None


def test_phoneme_chunks_and_refusals(ours):
    """Sentences become chunks, long ones cut at spaces under the limit;
    a voice of another language uses its espeak voice; unknown voices,
    Japanese voices and text with nothing to say are refused by field."""
    phonemizer = Phonemizer(ours.max_phonemes)
    assert len(phonemizer.chunks("One. Two!\nThree?", "af_tiny")) == 3
    assert split_phonemes("ab cd ef", 5) == ["ab cd", "ef"]
    assert split_phonemes("abcdefg", 3) == ["abc", "def", "g"]
    assert all(len(p) <= 40 for p in split_phonemes(" ".join(["wɜːd"] * 50), 40))
    assert phonemizer.chunks("Hola.", "ef_x") != phonemizer.chunks("Hola.", "af_x")
    with pytest.raises(SpeechTextError) as exc:
        phonemizer.chunks("Hi.", "jf_alpha")
    assert exc.value.field == "voice" and "Japanese" in exc.value.message
    with pytest.raises(SpeechTextError) as exc:
        phonemizer.chunks("  \n ", "af_tiny")
    assert exc.value.field == "input"
    with pytest.raises(SpeechInputError) as err:
        ours.check_voice("af_nobody")
    assert err.value.field == "voice" and "af_tiny" in err.value.message
    ours.check_voice("af_tiny,am_tiny")


def test_kind_detection_and_refusal_wording(kokoro_dir):
    """A Kokoro directory is a speech model; its capability is ``speech``; a
    request for another kind names both kinds and what each serves."""
    from shared.model_kind import capabilities, detect_kind, serves, wrong_kind_message

    assert detect_kind(kokoro_dir) == "speech"
    assert capabilities("speech") == ["speech"]
    assert serves("speech", "speech") and not serves("speech", "generate") and not serves("generate", "speech")
    message = wrong_kind_message("tts", "speech", "generate")
    assert "kind 'speech'" in message and "/v1/audio/speech" in message and "'generate'" in message


def test_loading_asks_no_hub_and_leaves_the_environment(kokoro_dir, monkeypatch):
    """The loader hands mlx-audio a local ``Path``: with the hub at a
    counting loopback listener (and not switched offline) the load connects
    nowhere and sets no variable (``HF_HUB_OFFLINE`` among them)."""
    from worker.speech.model import load_speech_model

    with watching_the_hub(monkeypatch) as watch:
        model = load_speech_model(str(kokoro_dir))
    assert model.family == "kokoro"
    assert_no_hub_and_no_environment_change(watch)
