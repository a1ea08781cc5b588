"""Every common vision family through the one vision path, in process: a
tiny random-weight model of each (:mod:`tests.tiny_vlm_families`, built
from mlx-vlm's own classes) loaded by worker.vision.model, prompts built by
worker.prompting.builder with images, run by the Scheduler over the batch
engine. Greedy tokens equal mlx-vlm's own ``generate`` for the same image
and question, alone and batched with a text request (whose tokens equal
mlx-vlm's text answer), and a repeated image is a prefix-cache hit with
the same tokens."""

from __future__ import annotations

import hashlib
import io

import pytest

from tests.test_vision_engine import TOKENS, _Engine, _png, _request
from tests.test_vision_video import FPS, MAX_FRAMES, make_clip, video_request
from tests.tiny_vlm_families import BUILDERS

SERVED = sorted(BUILDERS)
"""The families served (Qwen3.5 on viewed caches: worker.vision.cache_view)."""


@pytest.fixture(scope="module", params=SERVED)
def family(request, tmp_path_factory):
    """One family's tiny model: the running engine over it, and mlx-vlm's
    own model and processor loaded again on this thread (arrays a model
    makes lazily at load belong to the loading thread's stream)."""
    from mlx_vlm import load

    from worker.vision.video import VideoLimits

    path = BUILDERS[request.param](tmp_path_factory.mktemp(request.param) / "m")
    running = _Engine(path, video_limits=VideoLimits(fps=FPS, max_frames=MAX_FRAMES))
    yield running, load(str(path))
    running.stop()


VIDEO_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_5")
"""The families here that take videos (Qwen2-VL's and Qwen2.5-VL's through
their processor's own expansion, Qwen3.5's laid out as Qwen3-VL's, whose
own are tests/test_vision_video.py's)."""


def reference(library, text: str, image: bytes | None, video=None) -> list[int]:
    """mlx-vlm's own greedy tokens for the same turn (the prompt rendered
    by the processor's chat template, or its tokenizer's where the
    processor has none)."""
    from mlx_vlm import generate
    from PIL import Image

    model, processor = library
    templater = processor if getattr(processor, "chat_template", None) else processor.tokenizer
    media = [{"type": "image"}] if image else [{"type": "video"}] if video else []
    prompt = templater.apply_chat_template(
        [{"role": "user", "content": [{"type": "text", "text": text}, *media]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    pictures = [Image.open(io.BytesIO(image)).convert("RGB")] if image else None
    sampling = {"video": [str(video)], "fps": FPS, "max_frames": MAX_FRAMES} if video else {}
    result = generate(model, processor, prompt, image=pictures, max_tokens=TOKENS, temperature=0.0, **sampling)
    return list(result.token_ids)


def test_images_match_mlx_vlm_alone_batched_and_cached(family):
    engine, library = family
    red, blue = _png((255, 0, 0)), _png((0, 0, 255))
    want_red, want_blue = reference(library, "Hi", red), reference(library, "Hi", blue)
    want_text = reference(library, "Hello there, how are you?", None)
    assert want_red != want_blue  # the image decides the answer

    alone = engine.run(_request("red", "Hi", red))
    assert alone["red"] == (want_red, 0)
    mixed = engine.run(
        _request("blue", "Hi", blue), _request("text", "Hello there, how are you?", None), _request("red2", "Hi", red)
    )
    assert mixed["blue"][0] == want_blue
    assert mixed["text"][0] == want_text
    assert mixed["red2"][0] == want_red and mixed["red2"][1] > 0  # the image came from the cache
    assert engine.scheduler.counters.max_batch_seen == 3  # the two images and the text decoded in one batch


def test_videos_match_mlx_vlm_alone_batched_and_cached(family, tmp_path):
    """Where the family takes videos through its processor (Qwen2-VL,
    Qwen2.5-VL): each clip's answer equals mlx-vlm's with the same frame
    sampling, alone, batched with a text request and from the prefix
    cache; an image and a video in one request are refused (mlx-vlm's
    model of these families reads one or the other)."""
    engine, library = family
    family_name = engine.prompts.images.model_type
    if family_name not in VIDEO_FAMILIES:
        assert engine.prompts.images.video_token_id is None  # no video part: refused at the request
        return
    clips = {name: (tmp_path / f"{name}.mp4") for name in ("moving", "red")}
    blobs = {name: make_clip(path, name) for name, path in clips.items()}
    want = {name: reference(library, "Hi", None, video=path) for name, path in clips.items()}
    assert want["moving"] != want["red"]  # the video decides the answer
    alone = engine.run(video_request("moving", "Hi", blobs["moving"]))
    assert alone["moving"] == (want["moving"], 0)
    mixed = engine.run(
        video_request("red", "Hi", blobs["red"]),
        _request("text", "Hello there, how are you?", None),
        video_request("moving2", "Hi", blobs["moving"]),
    )
    assert mixed["red"][0] == want["red"] and mixed["moving2"][0] == want["moving"]
    assert mixed["moving2"][1] > 0  # the video came from the cache
    from worker.vision.images import ImageError
    from worker.vision.inputs import IMAGES_OR_VIDEOS

    if family_name not in IMAGES_OR_VIDEOS:
        return
    red = _png((255, 0, 0))
    with pytest.raises(ImageError, match="reads images or videos in one request, not both"):
        engine.prompts.images.prepare(
            [5, -1, -2, 6],
            [(red, hashlib.sha256(red).hexdigest()), (blobs["red"], hashlib.sha256(blobs["red"]).hexdigest())],
            ["image", "video"],
        )
