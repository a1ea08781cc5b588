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

import mlx.core as mx
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


VIDEO_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_5", "qwen3_5_moe")
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


def text_reference(library, family_name: str, text: str) -> list[int]:
    """mlx-vlm's own greedy tokens for a text-only turn; for a
    cross-attention family (Llama 3.2 Vision), with its cross-attention
    gates at 0, so those layers pass the text through unchanged, as the
    model's reference implementation skips them for a prompt without an
    image (mlx-vlm 0.7.10 attends each text token to itself there:
    worker.vision.cross_attention)."""
    from worker.vision.cross_attention import CROSS_ATTENTION, cross_layers

    model = library[0]
    if family_name not in CROSS_ATTENTION:
        return reference(library, text, None)
    layers = [model.language_model.model.layers[i] for i in sorted(cross_layers(model))]
    gates = [(layer.cross_attn_attn_gate, layer.cross_attn_mlp_gate) for layer in layers]
    try:
        for layer in layers:
            layer.cross_attn_attn_gate = layer.cross_attn_mlp_gate = mx.zeros(1)
        return reference(library, text, None)
    finally:
        for layer, (attn, mlp) in zip(layers, gates):
            layer.cross_attn_attn_gate, layer.cross_attn_mlp_gate = attn, mlp


def test_images_match_mlx_vlm_alone_batched_and_cached(family):
    engine, library = family
    red, blue = _png((255, 0, 0)), _png((0, 0, 255))
    want_red, want_blue = reference(library, "Hi", red), reference(library, "Hi", blue)
    want_text = text_reference(library, engine.prompts.images.model_type, "Hello there, how are you?")
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


def _wide_png() -> bytes:
    """A 64x32 PNG, red left and blue right: Llama 3.2 Vision's processor
    puts it on 2 of its 4 tiles (tests.tiny_vlm_families' facts)."""
    from PIL import Image

    picture = Image.new("RGB", (64, 32), (255, 0, 0))
    picture.paste((0, 0, 255), (32, 0, 64, 32))
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return out.getvalue()


def tile_masked_reference(library, text: str, image: bytes) -> list[int]:
    """Greedy tokens of mlx-vlm's own Llama 3.2 Vision model for ``text``
    then ``image``, every token after the image (generated ones too) seeing
    the image's real tiles only, as the reference implementation extends
    the prompt's last cross-attention mask row (mlx-vlm's ``generate``
    passes no mask after the prompt): its ``get_input_embeddings`` and
    language model, the prompt's last mask row passed at each step."""
    from mlx_vlm.models.cache import make_prompt_cache
    from PIL import Image

    model, processor = library
    prompt = processor.tokenizer.apply_chat_template(
        [{"role": "user", "content": [{"type": "text", "text": text}, {"type": "image"}]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    inputs = processor(text=[prompt], images=[Image.open(io.BytesIO(image)).convert("RGB")], return_tensors="np")
    ids = mx.array(inputs["input_ids"])
    media = {k: mx.array(inputs[k]) for k in ("aspect_ratio_ids", "aspect_ratio_mask", "cross_attention_mask")}
    embedded = model.get_input_embeddings(ids, mx.array(inputs["pixel_values"]), mask=mx.ones(ids.shape), **media)
    states, mask, rows = (
        embedded.cross_attention_states,
        embedded.cross_attention_mask,
        embedded.full_text_row_masked_out_mask,
    )
    cache = make_prompt_cache(model.language_model)
    logits = model.language_model(
        ids,
        inputs_embeds=embedded.inputs_embeds,
        cache=cache,
        cross_attention_states=states,
        cross_attention_mask=mask,
        full_text_row_masked_out_mask=rows,
    ).logits
    tokens = []
    for _ in range(TOKENS):
        token = mx.argmax(logits[:, -1], axis=-1)
        tokens.append(int(token.item()))
        logits = model.language_model(
            token[None],
            cache=cache,
            cross_attention_states=states,
            cross_attention_mask=mask[:, :, -1:],
            full_text_row_masked_out_mask=rows[:, :, -1:],
        ).logits
    return tokens


def test_cross_attention_image_on_fewer_tiles_sees_only_its_tiles(family):
    """Llama 3.2 Vision with an image on 2 of its 4 tiles: the answer, alone
    and batched with a square image and a text request, equals the library
    model's with the tile mask kept for every token after the image
    (worker.vision.cross_attention); two images in one request are refused."""
    engine, library = family
    from worker.vision.cross_attention import CROSS_ATTENTION

    if engine.prompts.images.model_type not in CROSS_ATTENTION:
        return
    wide, red = _wide_png(), _png((255, 0, 0))
    want = tile_masked_reference(library, "Hi", wide)
    assert engine.run(_request("wide", "Hi", wide))["wide"][0] == want
    mixed = engine.run(_request("red", "Hi", red), _request("text", "Hello there", None), _request("wide2", "Hi", wide))
    assert mixed["wide2"][0] == want and mixed["red"][0] == reference(library, "Hi", red)
    from worker.vision.images import ImageError

    with pytest.raises(ImageError, match="reads one image per request"):
        engine.prompts.images.prepare(
            [5, -1, -2, 6], [(red, hashlib.sha256(red).hexdigest()), (wide, hashlib.sha256(wide).hexdigest())]
        )
