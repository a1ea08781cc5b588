"""Videos and audio clips in chat, end to end: a real gateway configured
from a TOML file (``video_*`` keys) serves the tiny random-weight Qwen3-VL
and the tiny Gemma 4 with an audio tower of ``tests/tiny_vlm.py`` and the
tiny Gemma 3n and Qwen3-Omni of ``tests/tiny_vlm_families`` (real mlx-vlm
workers) next to the tiny text model, asked through the official
openai SDK and plain HTTP with real MP4 bytes written by OpenCV and WAV
bytes written by the standard library. Greedy decoding; that the workers'
answers equal mlx-vlm's own is checked in process by
``tests/test_vision_video.py`` and ``tests/test_vision_audio.py``."""

from __future__ import annotations

import base64
import http.server
import threading

import httpx
import openai
import pytest

from tests.conftest import API_KEY, TINY, settled_stats, start_server
from tests.test_vision_audio import make_wav
from tests.test_vision_video import make_clip
from tests.tiny_vlm import build_tiny_audio_vlm, build_tiny_vlm
from tests.tiny_vlm_families.gemma3n import build_tiny_gemma3n
from tests.tiny_vlm_families.qwen3_omni_moe import build_tiny_qwen3_omni_moe

VLM = "tiny-vlm"
AUDIO = "tiny-audio"
GEMMA3N = "tiny-gemma3n"
OMNI = "tiny-qwen3-omni"
TOKENS = 6
VIDEO_CONFIG = {"video_fps": 2.0, "video_max_frames": 8, "video_max_seconds": 5.0, "video_max_bytes": "1MiB"}


def _data_url(blob: bytes, media: str = "video/mp4") -> str:
    """``blob`` as a base64 data URL."""
    return f"data:{media};base64,{base64.b64encode(blob).decode()}"


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """A moving and a one-colour clip (3 s), and a 6 s clip (over the 5 s limit)."""
    root = tmp_path_factory.mktemp("clips")
    return {
        "moving": make_clip(root / "moving.mp4", "moving"),
        "red": make_clip(root / "red.mp4", "red"),
        "long": make_clip(root / "long.mp4", "moving", seconds=6.0),
    }


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    """A gateway serving the tiny VLM with video limits, the tiny audio
    models (clips of at most 5 s) and the tiny text model."""
    vlm = build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm") / "m", seed=1)
    audio = build_tiny_audio_vlm(tmp_path_factory.mktemp("tiny-audio") / "m")
    gemma3n = build_tiny_gemma3n(tmp_path_factory.mktemp("tiny-gemma3n") / "m")
    omni = build_tiny_qwen3_omni_moe(tmp_path_factory.mktemp("tiny-qwen3-omni") / "m")
    srv = start_server(
        tmp_path_factory.mktemp("video-gw"),
        [
            {"name": VLM, "source": str(vlm), "max_batch_size": 4, **VIDEO_CONFIG},
            {"name": AUDIO, "source": str(audio), "max_batch_size": 4, "audio_max_seconds": 5.0},
            {"name": GEMMA3N, "source": str(gemma3n), "max_batch_size": 4, "audio_max_seconds": 5.0},
            {"name": OMNI, "source": str(omni), "max_batch_size": 4, "audio_max_seconds": 5.0},
            {"name": TINY, "source": str(tiny_model_dir), "max_batch_size": 2},
        ],
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    """The openai SDK."""
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=300)


def _content(url: str) -> list[dict]:
    """ "Hi" then a video_url part."""
    return [{"type": "text", "text": "Hi"}, {"type": "video_url", "video_url": {"url": url}}]


def _chat(client, url: str, model: str = VLM):
    """A greedy chat completion for "Hi" and one video, through the SDK."""
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": _content(url)}], max_tokens=TOKENS, temperature=0
    )


def _post(server, path: str, body: dict) -> httpx.Response:
    """POST ``body`` as JSON with the API key."""
    return httpx.post(f"{server.url}{path}", json=body, headers=server.headers, timeout=120)


def test_openai_sdk_video_answers_and_cache(server, client, clips):
    """The clip decides the answer; a repeat comes from the prefix cache
    (the vision tower does not run again, cached tokens cover the video)
    with the same answer as cold; streaming gives the same text."""
    before = settled_stats(server, VLM)
    cold = _chat(client, _data_url(clips["moving"]))
    middle = settled_stats(server, VLM)
    assert middle["vision_prefills"] - before["vision_prefills"] == 1
    assert middle["vision_image_tokens"] > before["vision_image_tokens"]
    other = _chat(client, _data_url(clips["red"]))
    assert cold.choices[0].message.content != other.choices[0].message.content
    after_other = settled_stats(server, VLM)
    warm = _chat(client, _data_url(clips["moving"]))
    after = settled_stats(server, VLM)
    assert warm.choices[0].message.content == cold.choices[0].message.content
    assert after["vision_prefills"] == after_other["vision_prefills"]  # the video came from the cache
    assert warm.usage.prompt_tokens == cold.usage.prompt_tokens
    assert warm.usage.prompt_tokens_details.cached_tokens >= warm.usage.prompt_tokens - 1
    streamed = client.chat.completions.create(
        model=VLM,
        messages=[{"role": "user", "content": _content(_data_url(clips["moving"]))}],
        max_tokens=TOKENS,
        temperature=0,
        stream=True,
    )
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == cold.choices[0].message.content


PARAM = "messages[0].content[1].video_url.url"


@pytest.mark.parametrize(
    ("which", "media", "code", "words"),
    [
        ("garbage", "video/mp4", "invalid_request_error", "video 0 is not a video OpenCV can read"),
        ("long", "video/mp4", "invalid_request_error", "video 0 lasts 6.0 s, over the limit of 5 s"),
        ("big", "video/mp4", "invalid_request_error", "over the limit of 1048576"),
        ("moving", "image/png", "invalid_video", "unsupported video media type 'image/png'"),
    ],
)
def test_bad_videos_are_400s_naming_the_part(server, client, clips, which, media, code, words):
    """Each bad video is a 400 naming the part and the reason; the worker
    keeps serving."""
    blob = {"garbage": b"not a video at all " * 50, "big": b"\0" * (1024 * 1024 + 1)}.get(which) or clips[which]
    with pytest.raises(openai.BadRequestError) as raised:
        _chat(client, _data_url(blob, media))
    error = raised.value.body
    assert words in error["message"], error
    assert error["param"] == PARAM
    assert code in (error.get("code"), error.get("type"))
    assert _chat(client, _data_url(clips["red"])).choices[0].message.content


def test_request_shape_refusals(server, clips):
    """Bad base64, an unknown field, too many videos, a video_url outside
    a user message, and a remote URL with fetching off are 400s naming the
    part."""
    url = _data_url(clips["red"])
    cases = [
        (_content("data:video/mp4;base64,@@@"), "not valid base64", PARAM),
        (
            [{"type": "video_url", "video_url": {"url": url, "fps": 4}}],
            "unknown field 'fps'",
            "messages[0].content[0].video_url.fps",
        ),
        (_content(url) + _content(url)[1:] * 2, "too many videos: 3 given, at most 2", None),
        (_content("http://127.0.0.1:9/clip.mp4"), "remote video URLs are not fetched", PARAM),
    ]
    for content, words, param in cases:
        body = {"model": VLM, "messages": [{"role": "user", "content": content}], "max_tokens": 2}
        response = _post(server, "/v1/chat/completions", body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert words in error["message"], error
        if param:
            assert error["param"] == param
    body = {"model": VLM, "max_tokens": 2, "messages": [{"role": "assistant", "content": _content(url)}]}
    response = _post(server, "/v1/chat/completions", body)
    assert response.status_code == 400 and response.json()["error"]["param"] == "messages[0].content[1].type"


def _audio_part(clip: bytes, fmt: str = "wav") -> dict:
    """An ``input_audio`` part carrying ``clip``."""
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(clip).decode(), "format": fmt}}


def _ask_audio(client, clip: bytes, model: str = AUDIO):
    """A greedy chat completion for "Hi" and one clip, through the SDK."""
    content = [{"type": "text", "text": "Hi"}, _audio_part(clip)]
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": content}], max_tokens=TOKENS, temperature=0
    )


@pytest.mark.parametrize("model", [AUDIO, GEMMA3N, OMNI])
def test_openai_sdk_audio_answers_and_cache(server, client, model):
    """For each audio family (Gemma 4, Gemma 3n, Qwen3-Omni): the clip decides the
    answer; a repeat comes from the prefix cache (the audio tower does not
    run again) with the same answer as cold."""
    tone, noise = make_wav("tone"), make_wav("noise")
    before = settled_stats(server, model)
    cold = _ask_audio(client, tone, model)
    middle = settled_stats(server, model)
    assert middle["vision_prefills"] - before["vision_prefills"] == 1
    assert cold.choices[0].message.content != _ask_audio(client, noise, model).choices[0].message.content
    after_other = settled_stats(server, model)
    warm = _ask_audio(client, tone, model)
    assert warm.choices[0].message.content == cold.choices[0].message.content
    assert settled_stats(server, model)["vision_prefills"] == after_other["vision_prefills"]
    assert warm.usage.prompt_tokens_details.cached_tokens >= warm.usage.prompt_tokens - 1
    # the Responses API's input_audio part: the same turn, the same answer
    response = client.responses.create(
        model=model,
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Hi"}, _audio_part(tone)]}],
        max_output_tokens=TOKENS,
        temperature=0,
    )
    assert response.output_text == cold.choices[0].message.content


AUDIO_PARAM = "messages[0].content[1].input_audio.data"


def test_bad_clips_are_400s_naming_the_part(server, client):
    """Undecodable bytes and a clip over the model's 5 s are 400s naming the
    part; the worker keeps serving."""
    for clip, words in ((b"RIFF junk" * 40, "audio 0 is not WAV, MP3"), (make_wav("tone", 6.0), "lasts 6.0 s")):
        with pytest.raises(openai.BadRequestError) as raised:
            _ask_audio(client, clip)
        assert words in raised.value.body["message"] and raised.value.body["param"] == AUDIO_PARAM
    assert _ask_audio(client, make_wav("noise")).choices[0].message.content


def test_models_that_cannot_take_a_part_name_their_kind(server, clips):
    """A video or audio clip sent to the text model is a 400 naming the part
    and the model's kind (from the gateway); audio sent to the Qwen3-VL
    model, and a video or image sent to the audio model, are 400s naming
    the part and the family (from the worker)."""
    video = {"type": "video_url", "video_url": {"url": _data_url(clips["red"])}}
    audio = _audio_part(make_wav("tone", 0.5))
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}}
    cases = [
        (TINY, video, "model_has_no_video", f"model '{TINY}' (kind 'generate') cannot read videos", PARAM),
        (TINY, audio, "model_has_no_audio", f"model '{TINY}' (kind 'generate') cannot read audio", AUDIO_PARAM),
        (VLM, audio, None, "(kind 'vision', family qwen3_vl) cannot read audio", AUDIO_PARAM),
        (AUDIO, video, None, "this vision model (gemma4) does not take videos", PARAM),
        (
            AUDIO,
            image,
            None,
            "this vision model (gemma4) is served for audio only",
            "messages[0].content[1].image_url.url",
        ),
    ]
    for model, part, code, words, param in cases:
        body = {
            "model": model,
            "max_tokens": 2,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}, part]}],
        }
        response = _post(server, "/v1/chat/completions", body)
        assert response.status_code == 400, (model, response.text)
        error = response.json()["error"]
        assert words in error["message"], error
        assert error["param"] == param, error
        if code:
            assert error["code"] == code
    bad = {**audio, "input_audio": {"data": "AAAA", "format": "flac"}}
    body = {"model": AUDIO, "max_tokens": 2, "messages": [{"role": "user", "content": [bad]}]}
    response = _post(server, "/v1/chat/completions", body)
    assert (
        response.status_code == 400 and response.json()["error"]["param"] == "messages[0].content[0].input_audio.format"
    )


def test_responses_and_anthropic_name_the_video_part(server, clips):
    """Responses and Anthropic have no video part: one sent anyway is a 400
    naming the part; a Responses input_audio part sent to the text model is
    a 400 naming the part and its kind."""
    url = _data_url(clips["red"])
    body = {
        "model": VLM,
        "max_output_tokens": 2,
        "input": [{"role": "user", "content": [{"type": "input_video", "video_url": url}]}],
    }
    response = _post(server, "/v1/responses", body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"].startswith("input[0].content[0]")
    audio_body = {
        "model": TINY,
        "max_output_tokens": 2,
        "input": [{"role": "user", "content": [_audio_part(make_wav("tone", 0.5))]}],
    }
    refused = _post(server, "/v1/responses", audio_body)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "model_has_no_audio"
    assert refused.json()["error"]["param"] == "input[0].content[0].input_audio.data"
    assert "input_video" in response.json()["error"]["message"]
    video_block = {"type": "video", "source": {"type": "base64", "media_type": "video/mp4", "data": url.split(",")[1]}}
    body = {"model": VLM, "max_tokens": 2, "messages": [{"role": "user", "content": [video_block]}]}
    response = _post(server, "/v1/messages", body)
    assert response.status_code == 400, response.text
    assert response.json()["type"] == "error"
    assert "messages[0].content[0]" in response.json()["error"]["message"]
    assert "content block type 'video'" in response.json()["error"]["message"]


def test_remote_video_fetched_when_the_config_allows(tiny_model_dir, tmp_path_factory, clips):
    """With [images] remote_fetch on and the loopback server allowed, an
    http video URL (served as video/mp4) answers as the same video sent
    inline; the same URL served as image/png is refused as not a video."""
    clip = clips["moving"]

    class Handler(http.server.BaseHTTPRequestHandler):
        """Serves the moving clip, as video/mp4 (or image/png under /png/)."""

        def do_GET(self) -> None:  # noqa: N802 (the http.server name)
            """Answer with the clip."""
            self.send_response(200)
            self.send_header("Content-Type", "image/png" if self.path.startswith("/png/") else "video/mp4")
            self.send_header("Content-Length", str(len(clip)))
            self.end_headers()
            self.wfile.write(clip)

        def log_message(self, *args) -> None:
            """Quiet."""

    host = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=host.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{host.server_address[1]}"
    vlm = build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm-remote") / "m", seed=1)
    extra = '[images]\nremote_fetch = true\nallowed_hosts = ["127.0.0.1"]\nallowed_networks = ["127.0.0.0/8"]\n'
    srv = start_server(
        tmp_path_factory.mktemp("video-remote"), [{"name": VLM, "source": str(vlm), **VIDEO_CONFIG}], extra=extra
    )
    try:
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key=API_KEY, max_retries=0, timeout=300)
        inline = _chat(client, _data_url(clip)).choices[0].message.content
        assert _chat(client, f"{base}/clip.mp4").choices[0].message.content == inline
        with pytest.raises(openai.BadRequestError) as raised:
            _chat(client, f"{base}/png/clip.mp4")
        assert "is not a video" in raised.value.body["message"] and raised.value.body["param"] == PARAM
    finally:
        srv.stop()
        host.shutdown()
