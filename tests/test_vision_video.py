"""Videos in the vision path of the worker, in process: the tiny Qwen3-VL
loaded by worker.vision.model, prompts built by worker.prompting.builder
with a video part, run by the Scheduler over the batch engine. Greedy
tokens equal mlx-vlm's own ``generate`` for the same clip, sampling and
question; a repeated video is a prefix-cache hit with the same tokens; a
different clip changes the answer; every limit is a refusal naming the
part; and no temporary file outlives a request."""

from __future__ import annotations

import copy
import hashlib
import os

import pytest

from shared.protocol import ChatMessage, GenerateRequest, ImagePart, SamplingParams
from tests.test_vision_engine import TOKENS, _Engine
from tests.tiny_vlm import build_tiny_vlm

FPS = 2.0
MAX_FRAMES = 8


def make_clip(path, pattern: str, seconds: float = 3.0, rate: int = 8, size: tuple[int, int] = (96, 64)) -> bytes:
    """The bytes of an MP4 clip written by OpenCV: ``pattern`` ``moving``
    (a square crossing a gradient) or ``red`` (one colour)."""
    import cv2
    import numpy as np

    width, height = size
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), rate, (width, height))
    for i in range(int(seconds * rate)):
        if pattern == "red":
            frame = np.zeros((height, width, 3), np.uint8)
            frame[:] = (0, 0, 255)
        else:
            frame = np.tile(np.linspace(0, 255, width, dtype=np.uint8)[None, :, None], (height, 1, 3))
            x = (i * 7) % (width - 16)
            frame[20:36, x : x + 16] = (255, 255, 0)
        writer.write(frame)
    writer.release()
    return path.read_bytes()


def video_request(request_id: str, text: str, video: bytes) -> GenerateRequest:
    """A greedy one-turn chat request: ``text`` then the video."""
    part = ImagePart(data=video, sha256=hashlib.sha256(video).hexdigest(), offset=len(text), kind="video")
    return GenerateRequest(
        request_id=request_id,
        sampling=SamplingParams(max_tokens=TOKENS, temperature=0.0),
        messages=[ChatMessage(role="user", content=text, images=[part])],
    )


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Two clips of the same length and size, different content."""
    root = tmp_path_factory.mktemp("clips")
    return {name: (root / f"{name}.mp4", make_clip(root / f"{name}.mp4", name)) for name in ("moving", "red")}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """The running engine with video sampling at FPS, at most MAX_FRAMES
    (seed 1: a tiny model whose greedy answer differs between the clips)."""
    from worker.vision.video import VideoLimits

    running = _Engine(
        build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm"), seed=1),
        video_limits=VideoLimits(fps=FPS, max_frames=MAX_FRAMES),
    )
    yield running
    running.stop()


def _reference(engine: _Engine, text: str, clip_path) -> list[int]:
    """mlx-vlm's own greedy tokens for the same turn and clip, sampled the
    same way."""
    from mlx_vlm import generate

    content = [{"type": "text", "text": text}, {"type": "video"}]
    prompt = engine.processor.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )
    result = generate(
        engine.vlm,
        engine.processor,
        prompt,
        video=[str(clip_path)],
        fps=FPS,
        max_frames=MAX_FRAMES,
        max_tokens=TOKENS,
        temperature=0.0,
    )
    return list(result.token_ids)


def _temp_files() -> set[str]:
    """The temporary video files present now."""
    import tempfile

    from worker.vision.video import temp_dir

    where = temp_dir() or tempfile.gettempdir()
    return {name for name in os.listdir(where) if name.startswith("mlxd-video-")}


def test_video_requests_match_mlx_vlm_and_hit_the_cache(engine, clips):
    """Each clip's answer equals mlx-vlm's; the two differ; a repeat (also
    batched with the other clip) is served from the prefix cache with the
    same tokens; no temporary file is left."""
    (moving_path, moving), (red_path, red) = clips["moving"], clips["red"]
    before = _temp_files()
    want_moving, want_red = _reference(engine, "Hi", moving_path), _reference(engine, "Hi", red_path)
    assert want_moving != want_red  # the video decides the answer

    cold = engine.run(video_request("moving", "Hi", moving))
    assert cold["moving"] == (want_moving, 0)
    mixed = engine.run(video_request("red", "Hi", red), video_request("moving2", "Hi", moving))
    assert mixed["red"][0] == want_red
    assert mixed["moving2"][0] == want_moving and mixed["moving2"][1] > 0  # from the cache
    assert _temp_files() == before


def test_refusals_name_the_video_and_leave_no_temp_files(engine, clips):
    """An unreadable video, one over the duration limit, a video for a
    family served without videos and an audio clip are refused naming the
    part; no temporary file is left behind by any of them."""
    from worker.vision.images import ImageError
    from worker.vision.inputs import ImagePreparer
    from worker.vision.video import VideoLimits

    vocab = engine.prompts.vocab_size
    red = clips["red"][1]

    def prepare(blob: bytes, kind: str = "video", **options) -> None:
        processor = options.pop("processor", engine.processor)
        preparer = ImagePreparer(processor, vocab, model_type=options.pop("family", "qwen3_vl"), **options)
        preparer.prepare([5, -1, 6], [(blob, hashlib.sha256(blob).hexdigest())], [kind])

    before = _temp_files()
    with pytest.raises(ImageError, match="video 0 is not a video OpenCV can read") as raised:
        prepare(b"not a video" * 100)
    assert raised.value.index == 0
    with pytest.raises(ImageError, match="video 0 lasts 3.0 s, over the limit of 1 s"):
        prepare(red, video_limits=VideoLimits(max_seconds=1.0))
    with pytest.raises(ImageError, match="video 0 is 1[0-9]+ bytes, over the limit of 100"):
        prepare(red, video_limits=VideoLimits(max_bytes=100))
    no_videos = copy.copy(engine.processor)
    no_videos.video_token = None  # a processor that names no video token takes no videos
    with pytest.raises(ImageError, match=r"this vision model \(gemma3\) does not take videos"):
        prepare(red, family="gemma3", processor=no_videos)
    with pytest.raises(ImageError, match=r"this model \(kind 'vision', family qwen3_vl\) cannot read audio"):
        prepare(b"RIFF", kind="audio")
    assert _temp_files() == before


def test_penalties_read_video_keys_as_the_video_token(engine, clips):
    """A video's cache keys lie in their own range, so a logits processor
    (penalties) reads each prompt position as the token the model read:
    image keys as the image token, video keys as the video token."""
    import mlx.core as mx

    from worker.engine.admission import model_ids_only

    key_ids, vision = engine.prompts.images.prepare(
        [5, -1, 6], [(red := clips["red"][1], hashlib.sha256(red).hexdigest())], ["video"]
    )
    assert vision.video_keys_from is not None
    assert all(k >= vision.video_keys_from for k in key_ids if k >= engine.prompts.vocab_size)
    assert max(key_ids) < 2**31  # every key fits an int32
    seen = []
    wrapped = model_ids_only(
        lambda tokens, logits: seen.append(tokens.tolist()) or logits,
        vision.image_token_id,
        vision.video_token_id,
        vision.video_keys_from,
    )
    image_key = engine.prompts.vocab_size + 3
    wrapped(mx.array([*key_ids, image_key]), mx.zeros((1, engine.prompts.vocab_size)))
    assert seen[0][:-1] == vision.model_ids and seen[0][-1] == vision.image_token_id
