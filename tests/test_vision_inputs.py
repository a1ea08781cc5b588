"""worker.vision_inputs with the tiny VLM's real processor: the prepared
token ids and pixels equal what mlx-vlm's own processor call produces,
repeated images share a key, and mismatches and bad images are refused."""

from __future__ import annotations

import io

import numpy as np
import pytest

from tests.tiny_vlm import build_tiny_vlm
from worker.images import ImageError
from worker.vision_inputs import prepare


def _image(fmt: str, size: tuple[int, int], color: tuple[int, int, int]) -> bytes:
    """Real image bytes made by Pillow."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format=fmt)
    return out.getvalue()


@pytest.fixture(scope="module")
def processor(tmp_path_factory):
    """The tiny VLM's processor as mlx-vlm loads it."""
    from mlx_vlm import load

    return load(str(build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm"))))[1]


def _prompt(processor, images: int) -> str:
    """A rendered one-turn chat prompt with ``images`` images."""
    content = [{"type": "image"}] * images + [{"type": "text", "text": "Describe these."}]
    return processor.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )


def test_matches_the_processor(processor):
    """Two images of different sizes (PNG, JPEG): the same ids and pixels
    as the processor's own (MLX-producing) call."""
    from PIL import Image

    blobs = [_image("PNG", (64, 64), (200, 0, 0)), _image("JPEG", (84, 40), (0, 90, 200))]
    text = _prompt(processor, 2)
    ours = prepare(processor, text, blobs)
    pictures = [Image.open(io.BytesIO(b)).convert("RGB") for b in blobs]
    theirs = processor(text=[text], images=pictures, add_special_tokens=False)
    assert ours.prompt == np.array(theirs["input_ids"]).reshape(-1).tolist()
    assert np.allclose(ours.pixel_values, np.array(theirs["pixel_values"]))
    assert np.array_equal(ours.image_grid_thw, np.array(theirs["image_grid_thw"]))
    assert ours.prompt.count(processor.image_token_id) > 2


def test_same_image_same_key(processor):
    """The same image bytes give the same key; another image another."""
    text = _prompt(processor, 1)
    red = _image("PNG", (64, 64), (200, 0, 0))
    first, again = prepare(processor, text, [red]), prepare(processor, text, [red])
    other = prepare(processor, text, [_image("PNG", (64, 64), (0, 200, 0))])
    assert first.image_key == again.image_key != other.image_key
    assert len(first.image_key) == 64


def test_refusals(processor):
    """A placeholder/image count mismatch is a ValueError; a truncated image
    an ImageError naming it."""
    with pytest.raises(ValueError, match="places 1 images but the request carries 2"):
        prepare(processor, _prompt(processor, 1), [_image("PNG", (28, 28), (1, 1, 1))] * 2)
    from PIL import Image

    out = io.BytesIO()
    Image.effect_noise((64, 64), 80).convert("RGB").save(out, format="PNG")
    blob = out.getvalue()
    with pytest.raises(ImageError, match="image 0 is truncated or corrupt"):
        prepare(processor, _prompt(processor, 1), [blob[: len(blob) // 2]])
