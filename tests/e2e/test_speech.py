"""``POST /v1/audio/speech`` and ``GET /v1/audio/voices`` through the official
openai SDK and plain HTTP, against a real gateway with a real speech worker
(a tiny random Kokoro, :mod:`tests.tiny_kokoro`) and a tiny chat model.

Audio is checked sample for sample against mlx-audio's own pipeline run in
this process on the same phonemes (the worker seeds each chunk the same
way), decoded from every container it comes in; streams are read as they
come (``with_streaming_response``) and as SSE events.

Needs the ``speech`` extra.
"""

from __future__ import annotations

import base64
import concurrent.futures as cf
import io
import json
import shutil
import threading
import time

import httpx
import numpy as np
import openai
import pytest

pytest.importorskip("mlx_audio")
pytest.importorskip("soundfile")
pytest.importorskip("misaki")

import soundfile as sf  # noqa: E402

from tests.conftest import start_server, wait_for_stats  # noqa: E402
from tests.test_speech_model import READ_BY_FFMPEG, decode, library_audio, tiny_kokoro_dir  # noqa: E402
from worker.speech.encode import pcm16  # noqa: E402
from worker.speech.text import Phonemizer  # noqa: E402

TTS = "tiny-tts"
CHAT = "tiny-chat"


@pytest.fixture(scope="module")
def kokoro_dir(tmp_path_factory):
    return tiny_kokoro_dir(tmp_path_factory)


@pytest.fixture(scope="module")
def server(kokoro_dir, tiny_model_dir, tmp_path_factory):
    """A speech model (detected from its files) and a tiny chat model."""
    srv = start_server(
        tmp_path_factory.mktemp("speech-gw"),
        [{"name": TTS, "source": str(kokoro_dir), "aliases": ["tts"]}, {"name": CHAT, "source": str(tiny_model_dir)}],
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=server.api_key, timeout=240, max_retries=0)


def expected_pcm(kokoro_dir, text: str, voice: str, speed: float = 1.0) -> np.ndarray:
    """The 16-bit samples mlx-audio's pipeline gives for ``text`` (phonemized
    as the worker does) in ``voice`` (a blend ``a,b``: the pipeline's mean of
    the packs)."""
    chunks = Phonemizer(510).chunks(text, voice)
    pack = ",".join(str(kokoro_dir / "voices" / f"{name}.safetensors") for name in voice.split(","))
    return np.frombuffer(b"".join(pcm16(a) for a in library_audio(kokoro_dir, chunks, pack, speed)), dtype="<i2")


SAMPLE_TOLERANCE = 16
"""Most a worker's 16-bit sample may differ from the library's run in the
test process: the worker's BLAS runs with its own thread count
(``worker_environment``), so its float sums may round differently
(measured with an earlier, wider tiny model: at most 8 of 32768, on about
one sample in ten; with today's they agree exactly). The tiny model's
audio never clips (:data:`tests.tiny_kokoro.POST_GAIN`), so every sample
is compared. Bit-exactness against the library in one process is
:mod:`tests.test_speech_model`'s check."""


def same_samples(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal length, every sample within :data:`SAMPLE_TOLERANCE` of the library's."""
    return (
        got.shape == want.shape and int(np.abs(got.astype(np.int32) - want.astype(np.int32)).max()) <= SAMPLE_TOLERANCE
    )


@pytest.fixture(scope="module")
def hi_pcm(kokoro_dir):
    return expected_pcm(kokoro_dir, "Hi. Ok.", "af_tiny")


def test_whole_files_through_the_sdk_equal_the_library(client, hi_pcm):
    """``client.audio.speech.create`` in every format: wav and flac hold the
    library's samples exactly, pcm too (raw), mp3 / opus / aac decode to the
    same length within the codec's padding; the content types say the format."""
    for fmt in ("wav", "flac", "pcm", "mp3", "opus", "aac"):
        if fmt == "aac" and shutil.which("ffmpeg") is None:
            continue
        answer = client.audio.speech.create(model="tts", voice="af_tiny", input="Hi. Ok.", response_format=fmt)
        data = answer.read()
        assert answer.response.headers["content-type"].startswith("audio/")
        samples = decode(data, fmt, streamed=False)
        if fmt in ("wav", "flac", "pcm"):
            assert same_samples(samples, hi_pcm), fmt
        else:
            assert abs(samples.size - hi_pcm.size) < 0.1 * 24000, (fmt, samples.size, hi_pcm.size)


def test_streamed_audio_arrives_chunk_by_chunk(client, hi_pcm):
    """``with_streaming_response`` and ``stream_format="audio"``: the bytes
    come in pieces as chunks are synthesised, and together they make the
    same file (flac: the library's samples exactly; mp3: playable)."""
    for fmt in ("flac", "wav", "mp3"):
        with client.audio.speech.with_streaming_response.create(
            model=TTS, voice="af_tiny", input="Hi. Ok.", response_format=fmt, stream_format="audio"
        ) as response:
            pieces = [piece for piece in response.iter_bytes() if piece]
        assert len(pieces) >= 2, fmt
        data = b"".join(pieces)
        if (fmt, True) in READ_BY_FFMPEG and shutil.which("ffmpeg") is None:
            continue
        samples = decode(data, fmt, streamed=True)
        if fmt in ("flac", "wav"):
            assert same_samples(samples, hi_pcm), fmt
        else:
            assert abs(samples.size - hi_pcm.size) < 0.1 * 24000


def test_sse_stream_of_deltas_and_done(client, hi_pcm):
    """``stream_format="sse"``: ``speech.audio.delta`` events whose base64
    audio (pcm) is the library's samples, then ``speech.audio.done`` with usage."""
    with client.audio.speech.with_streaming_response.create(
        model=TTS, voice="af_tiny", input="Hi. Ok.", response_format="pcm", stream_format="sse"
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert [e["type"] for e in events] == ["speech.audio.delta", "speech.audio.delta", "speech.audio.done"]
    audio = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert same_samples(np.frombuffer(audio, dtype="<i2"), hi_pcm)
    usage = events[-1]["usage"]
    assert usage["input_tokens"] > 0 and usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_voice_blend_speed_and_voice_object(client, kokoro_dir):
    """A blend of two voices, a speed and a voice given as ``{"id": ...}``
    give the library's samples for the same settings (a blend: the
    pipeline's own ``load_voice`` mean of the two packs)."""
    data = client.audio.speech.create(
        model=TTS, voice={"id": "af_tiny"}, input="Yo.", response_format="wav", speed=1.5
    ).read()
    assert same_samples(sf.read(io.BytesIO(data), dtype="int16")[0], expected_pcm(kokoro_dir, "Yo.", "af_tiny", 1.5))
    blend = client.audio.speech.create(model=TTS, voice="af_tiny,am_tiny", input="Yo.", response_format="pcm").read()
    mixed = expected_pcm(kokoro_dir, "Yo.", "af_tiny,am_tiny")
    assert not same_samples(mixed, expected_pcm(kokoro_dir, "Yo.", "af_tiny"))  # the blend is neither voice
    assert same_samples(np.frombuffer(blend, dtype="<i2"), mixed)


def test_requests_share_the_worker(client):
    """A one-sentence request sent while a six-sentence one is being
    synthesised finishes first: requests take turns chunk by chunk. The long
    one is streamed so that its first chunk arriving (an event, not a
    sleep) shows it admitted and under way before the short one is sent."""
    long_started = threading.Event()
    long_pieces: list[float] = []  # when each piece of the long answer arrived

    def speak_long() -> None:
        try:
            with client.audio.speech.with_streaming_response.create(
                model=TTS,
                voice="am_tiny",
                input="Hi. Hey. Yo. Ok. Go. No.",
                response_format="pcm",
                stream_format="audio",
            ) as response:
                for piece in response.iter_bytes():
                    if piece:
                        long_pieces.append(time.monotonic())
                        long_started.set()
            long_pieces.append(time.monotonic())  # the end of the answer
        finally:
            long_started.set()  # a failed request ends the wait too (its error is raised below)

    with cf.ThreadPoolExecutor(1) as pool:
        long = pool.submit(speak_long)
        assert long_started.wait(120), "the long request's first chunk did not come within 120 s"
        if long.done():
            long.result()  # raises the long request's failure, if it failed
        client.audio.speech.create(model=TTS, voice="am_tiny", input="Ok.", response_format="pcm").read()
        short_done = time.monotonic()
        long.result(timeout=240)
    assert long_pieces[0] < short_done < long_pieces[-1], "the short request did not finish while the long one ran"
    assert any(short_done < t for t in long_pieces[:-1]), "no chunk of the long request came after the short one"


def test_client_leaving_a_stream_aborts_the_request(server):
    """A client that reads the first streamed chunk of a long input and
    leaves: the worker aborts the request (one terminal, counted) instead of
    synthesising the rest, and is idle again."""
    before = server.worker(TTS)["stats"]["requests_aborted"]
    # far more sentences than can be synthesised before the abort arrives: only a broken abort costs them
    body = {"model": TTS, "voice": "af_tiny", "input": " ".join(["Hi. Hey. Yo. Ok. Go."] * 8), "stream_format": "audio"}
    with httpx.stream("POST", server.url + "/v1/audio/speech", json=body, headers=server.headers, timeout=240) as r:
        assert r.status_code == 200 and r.headers["content-type"] == "audio/mpeg"
        next(r.iter_bytes())
    stats = wait_for_stats(server, TTS, lambda s: s["requests_aborted"] > before and s["running"] == 0)
    assert stats["requests_aborted"] == before + 1


def test_refusals_name_the_field(client, server):
    """Unknown voice, instructions Kokoro cannot follow, bad speed and format,
    an empty input, a speech model asked to chat and a chat model asked to
    speak: 400s naming the field (and both kinds)."""
    cases = [
        ({"voice": "nobody"}, "voice", "af_tiny"),
        ({"instructions": "whisper"}, "instructions", "instructions"),
        ({"speed": 5.0}, "speed", "4"),
        ({"input": ""}, "input", "input"),
        ({"input": " \n "}, "input", "nothing to speak"),
    ]
    for change, param, words in cases:
        body = {"model": TTS, "voice": "af_tiny", "input": "Hi.", **change}
        with pytest.raises(openai.BadRequestError) as exc:
            client.audio.speech.create(**body)
        assert exc.value.body["param"] == param and words in exc.value.body["message"], exc.value.body
    r = httpx.post(
        server.url + "/v1/audio/speech",
        headers=server.headers,
        json={"model": TTS, "voice": "af_tiny", "input": "Hi.", "response_format": "ogg"},
        timeout=60,
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format"
    with pytest.raises(openai.BadRequestError) as exc:
        client.audio.speech.create(model=CHAT, voice="af_tiny", input="Hi.")
    message = exc.value.body["message"]
    assert exc.value.body["code"] == "wrong_model_kind" and "'generate'" in message and "'speech'" in message
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model=TTS, messages=[{"role": "user", "content": "hi"}])
    assert exc.value.body["code"] == "wrong_model_kind" and "'speech'" in exc.value.body["message"]


def test_voices_models_and_metrics(client, server):
    """``GET /v1/audio/voices`` lists the speech model's voices (all, or one
    model's; a chat model has none), ``/v1/models`` gives each model's kind,
    ``/api/show`` its capabilities, and ``/metrics`` counts the audio seconds
    synthesised with the model label."""
    voices = httpx.get(server.url + "/v1/audio/voices", headers=server.headers, timeout=60).json()
    assert [(v["id"], v["model"]) for v in voices["data"]] == [("af_tiny", TTS), ("am_tiny", TTS)]
    one = httpx.get(server.url + "/v1/audio/voices", params={"model": "tts"}, headers=server.headers, timeout=60)
    assert len(one.json()["data"]) == 2
    chat = httpx.get(server.url + "/v1/audio/voices", params={"model": CHAT}, headers=server.headers, timeout=60)
    assert chat.status_code == 400 and chat.json()["error"]["param"] == "model"
    kinds = {m.id: m.model_extra["kind"] for m in client.models.list().data}
    assert kinds == {TTS: "speech", CHAT: "generate"}
    show = httpx.post(server.url + "/api/show", json={"model": TTS}, headers=server.headers, timeout=60).json()
    assert show["capabilities"] == ["speech"]
    client.audio.speech.create(model=TTS, voice="af_tiny", input="Hi.", response_format="pcm").read()
    metrics = httpx.get(server.url + "/metrics", headers=server.headers, timeout=60).text
    line = next(x for x in metrics.splitlines() if x.startswith("mlxd:audio_seconds_out_total") and TTS in x)
    assert float(line.split()[-1]) > 0
