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
    from worker.loading.loader import resolve_source

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


def test_kind_and_unsupported_families(tiny_vlm_path, tmp_path):
    """The tiny VLM's kind is ``vision`` (and a configured kind wins); a
    vision model mlx-vlm cannot load is refused at load, saying why (the
    families served are not a list: see tests/test_vision_families.py)."""
    import json

    from shared.model_kind import model_kind
    from worker.loading.loader import ModelLoadError
    from worker.vision.model import load_vision_model

    assert model_kind(tiny_vlm_path) == "vision"
    assert model_kind(tiny_vlm_path, "generate") == "generate"
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llava", "vision_config": {}}))
    with pytest.raises(ModelLoadError, match="mlx-vlm cannot load .*No safetensors"):
        load_vision_model(str(tmp_path))
    omni = {"model_type": "qwen3_omni_moe", "thinker_config": {"vision_config": {}, "audio_config": {}}}
    (tmp_path / "config.json").write_text(json.dumps(omni))
    assert model_kind(tmp_path) == "vision"  # Qwen-Omni: its towers' configs sit in its thinker's
