"""The tiny VLM builder (tests/tiny_vlm.py) gives a model mlx-vlm loads and
runs, whose prompt carries the image's tokens and whose output depends on
the image."""

from __future__ import annotations

import pytest

from tests.tiny_vlm import build_tiny_vlm


@pytest.fixture(scope="module")
def tiny_vlm_path(tmp_path_factory):
    """The tiny VLM's directory, built once."""
    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm"))


@pytest.fixture(scope="module")
def tiny_vlm(tiny_vlm_path):
    """The tiny VLM, loaded once by mlx-vlm."""
    from mlx_vlm import load

    return load(str(tiny_vlm_path))


def test_vision_tower_detected_from_the_config(tiny_vlm_path):
    """The tiny VLM has a vision tower; the default text model, a missing
    directory and a file do not."""
    from shared.config import DEFAULT_MODEL_SOURCE
    from shared.model_kind import has_vision_tower
    from worker.loader import resolve_source

    assert has_vision_tower(tiny_vlm_path)
    assert not has_vision_tower(resolve_source(DEFAULT_MODEL_SOURCE))
    assert not has_vision_tower(tiny_vlm_path / "missing")
    assert not has_vision_tower(tiny_vlm_path / "config.json")


def _run(tiny_vlm, image):
    """Greedy 6-token generation for one image and a fixed question."""
    from mlx_vlm import generate

    model, processor = tiny_vlm
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert prompt.count("<|image_pad|>") == 1
    result = generate(model, processor, prompt, image=[image], max_tokens=6, temperature=0.0)
    text_tokens = len(processor.tokenizer(prompt)["input_ids"])
    assert result.prompt_tokens == text_tokens - 1 + 4  # a 64x64 image: 4x4 patches, merged 2x2
    return result


def test_tiny_vlm_generates_from_an_image(tiny_vlm):
    """The prompt grows by the image's tokens, generation is deterministic,
    and two different images give different logits."""
    from PIL import Image

    red = Image.new("RGB", (64, 64), (220, 10, 10))
    noise = Image.effect_noise((64, 64), 100).convert("RGB")
    first, again, other = _run(tiny_vlm, red), _run(tiny_vlm, red), _run(tiny_vlm, noise)
    assert first.generation_tokens == 6
    assert first.token_ids == again.token_ids
    assert first.logprobs.tolist() != other.logprobs.tolist()


def test_tiny_vlm_batches_an_image_request_with_a_text_request(tiny_vlm):
    """mlx-vlm's continuous batching runs the tiny VLM with an image request
    and a text request in one batch (inputs prepared without MLX by
    worker.vision_inputs), each giving the tokens it gives alone."""
    import io

    import mlx.core as mx
    from mlx_vlm import generate
    from mlx_vlm.generate.ar import BatchGenerator
    from PIL import Image

    from worker.vision_inputs import prepare

    model, processor = tiny_vlm
    # a fixed picture (Image.effect_noise draws from the C library's rand(), whose
    # state depends on what ran before in the process)
    import numpy as np

    picture = Image.fromarray(np.random.default_rng(7).integers(0, 256, (64, 64, 3), dtype=np.uint8), "RGB")
    png = io.BytesIO()
    picture.save(png, format="PNG")
    with_image = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What?"}]}]
    text_only = [{"role": "user", "content": [{"type": "text", "text": "Hello there, how are you?"}]}]
    prompts = [
        processor.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in (with_image, text_only)
    ]
    alone = [
        generate(model, processor, prompts[0], image=[picture], max_tokens=8, temperature=0.0).token_ids,
        generate(model, processor, prompts[1], max_tokens=8, temperature=0.0).token_ids,
    ]
    inputs = [prepare(processor, prompts[0], [png.getvalue()]), prepare(processor, prompts[1], [])]

    def prompt_kwargs(item):
        """mlx-vlm's per-prompt inputs: the grid and the input embeddings."""
        extra = {} if item.pixel_values is None else {"image_grid_thw": mx.array(item.image_grid_thw)}
        pixels = None if item.pixel_values is None else mx.array(item.pixel_values)
        embedded = model.get_input_embeddings(mx.array([item.prompt]), pixels, **extra)
        return {**extra, **{k: v for k, v in embedded.to_dict().items() if v is not None}}

    batch = BatchGenerator(model, processor, max_tokens=8, stop_tokens=set(), greedy_sampling=True)
    uids = batch.insert([i.prompt for i in inputs], max_tokens=[8, 8], prompt_kwargs=[prompt_kwargs(i) for i in inputs])
    produced: dict[int, list[int]] = {uid: [] for uid in uids}
    for _ in range(40):
        _, responses = batch.next()
        for response in responses:
            produced[response.uid].append(response.token)
        if all(len(tokens) == 8 for tokens in produced.values()):
            break
    batch.close()
    assert [produced[uid] for uid in uids] == alone
