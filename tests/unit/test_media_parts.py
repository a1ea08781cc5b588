"""gateway.images.parts for videos and audio: a video data URL gives its
bytes, an http(s) URL a remote placeholder of kind ``video`` that keeps its
kind on the wire; an ``input_audio`` value gives its bytes; every bad shape
is a 400 naming the field, with code ``invalid_video`` / ``invalid_audio``."""

from __future__ import annotations

import base64

import pytest

from gateway.core.errors import APIError
from gateway.images.parts import (
    MAX_AUDIO_BYTES,
    MAX_VIDEO_BYTES,
    RemoteImage,
    image_part,
    openai_audio_part,
    openai_video_part,
    remote_of,
)

CLIP = b"\x00\x00\x00\x1cftypisom not really a video, the worker decides"
B64 = base64.b64encode(CLIP).decode()


def test_video_data_url_and_remote_url():
    """A data URL gives the bytes; an http(s) URL a remote video whose
    placeholder part carries kind ``video`` and comes back as the same."""
    assert openai_video_part({"url": f"data:video/mp4;base64,{B64}"}, "p") == CLIP
    assert openai_video_part({"url": f"data:Video/WebM;codecs=vp9;base64,{B64}"}, "p") == CLIP
    remote = openai_video_part({"url": "https://example.com/a.mp4"}, "p")
    assert remote == RemoteImage("https://example.com/a.mp4", "p.url", "video")
    part = image_part(remote, 3)
    assert part.kind == "video" and remote_of(part) == remote
    assert image_part(CLIP, 0, "q", "video").kind == "video"


@pytest.mark.parametrize(
    ("value", "param", "words"),
    [
        ("data:video/mp4;base64,AAAA", "p", "must be an object"),
        ({"url": "x", "detail": "low"}, "p.detail", "unknown field 'detail'"),
        ({"url": ""}, "p.url", "non-empty string"),
        ({"url": "file:///etc/passwd"}, "p.url", "http(s) URL or a data:video"),
        ({"url": "data:video/mp4,raw"}, "p.url", "http(s) URL or a data:video"),
        ({"url": f"data:image/png;base64,{B64}"}, "p.url", "unsupported video media type 'image/png'"),
        ({"url": "data:video/mp4;base64,"}, "p.url", "non-empty base64"),
        ({"url": "data:video/mp4;base64,@@"}, "p.url", "not valid base64"),
        ({"url": "data:video/mp4;base64," + "A" * ((MAX_VIDEO_BYTES * 4) // 3 + 8)}, "p.url", "larger than"),
    ],
)
def test_bad_videos(value, param, words):
    """Each bad ``video_url`` value is a 400 naming the field."""
    with pytest.raises(APIError) as raised:
        openai_video_part(value, "p")
    assert raised.value.status == 400 and raised.value.param == param and words in raised.value.message
    assert raised.value.code == "invalid_video"


def test_audio():
    """``{"data", "format"}`` with wav or mp3 gives the bytes."""
    for fmt in ("wav", "mp3"):
        assert openai_audio_part({"data": B64, "format": fmt}, "p") == CLIP


@pytest.mark.parametrize(
    ("value", "param", "words"),
    [
        ("AAAA", "p", "must be an object"),
        ({"data": B64, "format": "wav", "rate": 1}, "p.rate", "unknown field 'rate'"),
        ({"data": B64}, "p.format", "'wav' or 'mp3'"),
        ({"data": B64, "format": "flac"}, "p.format", "'wav' or 'mp3'"),
        ({"data": "", "format": "wav"}, "p.data", "non-empty base64"),
        ({"data": "@@@@", "format": "wav"}, "p.data", "not valid base64"),
        ({"data": "A" * ((MAX_AUDIO_BYTES * 4) // 3 + 8), "format": "mp3"}, "p.data", "larger than"),
    ],
)
def test_bad_audio(value, param, words):
    """Each bad ``input_audio`` value is a 400 naming the field."""
    with pytest.raises(APIError) as raised:
        openai_audio_part(value, "p")
    assert raised.value.status == 400 and raised.value.param == param and words in raised.value.message
    assert raised.value.code == "invalid_audio"
