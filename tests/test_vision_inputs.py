"""worker.vision.inputs with the tiny VLM's real processor: the prepared
model ids and pixels equal what mlx-vlm's own processor call produces, the
cache-key ids follow the image's content, and mismatches and bad images
are refused."""

from __future__ import annotations

import hashlib
import io

import mlx.core as mx
import numpy as np
import pytest

from tests.tiny_vlm import build_tiny_vlm
from worker.vision.images import ImageError
from worker.vision.inputs import ImagePreparer
from worker.vision.markup import part_markup


def _image(fmt: str, size: tuple[int, int], color: tuple[int, int, int]) -> bytes:
    """Real image bytes made by Pillow."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format=fmt)
    return out.getvalue()


def _part(blob: bytes) -> tuple[bytes, str]:
    """An image's bytes with their digest."""
    return blob, hashlib.sha256(blob).hexdigest()


@pytest.fixture(scope="module")
def processor(tmp_path_factory):
    """The tiny VLM's processor as mlx-vlm loads it."""
    from mlx_vlm import load

    return load(str(build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm"))))[1]


@pytest.fixture(scope="module")
def preparer(processor):
    """The preparer over the tiny VLM's processor."""
    return ImagePreparer(processor, len(processor.tokenizer))


def _marked(processor, preparer, images: int) -> tuple[str, list[int]]:
    """A rendered one-turn prompt with ``images`` images, and its ids with
    the ``-(k+1)`` markers where the image tokens stand."""
    content = [{"type": "image"}] * images + [{"type": "text", "text": "Describe these."}]
    text = processor.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )
    ids = list(processor.tokenizer(text, add_special_tokens=False)["input_ids"])
    tokenizer = processor.tokenizer
    markup = [tokenizer.convert_tokens_to_ids(t) for t in ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>")]
    marked, k, i = [], 0, 0
    while i < len(ids):
        if ids[i : i + 3] == markup:
            marked.append(-(k + 1))
            k += 1
            i += 3
        else:
            marked.append(ids[i])
            i += 1
    return text, marked


def test_matches_the_processor(processor, preparer):
    """Two images of different sizes (PNG, JPEG): the same ids and pixels
    as the processor's own (MLX-producing) call; the keys stand where the
    image tokens do, past the vocabulary."""
    from PIL import Image

    blobs = [_image("PNG", (64, 64), (200, 0, 0)), _image("JPEG", (84, 40), (0, 90, 200))]
    text, ids = _marked(processor, preparer, 2)
    keys, vision = preparer.prepare(ids, [_part(b) for b in blobs])
    pictures = [Image.open(io.BytesIO(b)).convert("RGB") for b in blobs]
    theirs = processor(text=[text], images=pictures, add_special_tokens=False)
    assert isinstance(theirs["pixel_values"], mx.array)  # the library's own call still converts
    assert isinstance(vision.pixel_values, np.ndarray)  # the preparer's stays NumPy
    assert vision.model_ids == np.array(theirs["input_ids"]).reshape(-1).tolist()
    assert np.allclose(vision.pixel_values, np.array(theirs["pixel_values"]))
    assert np.array_equal(vision.image_grid_thw, np.array(theirs["image_grid_thw"]))
    assert len(keys) == len(vision.model_ids)
    for key, model_id in zip(keys, vision.model_ids):
        assert (key >= preparer.vocab_size) == (model_id == preparer.image_token_id)
    end = processor.tokenizer.convert_tokens_to_ids("<|vision_end|>")
    assert vision.image_end == max(i for i, t in enumerate(vision.model_ids) if t == end) + 1  # after the markup


def test_keys_follow_the_content(processor, preparer):
    """The same image bytes give the same keys; another image other keys."""
    _, ids = _marked(processor, preparer, 1)
    red = _image("PNG", (64, 64), (200, 0, 0))
    first, again = preparer.prepare(ids, [_part(red)])[0], preparer.prepare(ids, [_part(red)])[0]
    other = preparer.prepare(ids, [_part(_image("PNG", (64, 64), (0, 200, 0)))])[0]
    assert first == again != other


def test_the_template_markup_is_read(processor, preparer):
    """The tiny template wraps an image's token in vision start and end tokens."""
    assert part_markup(processor.tokenizer, "image") == "<|vision_start|><|image_pad|><|vision_end|>"


def test_refusals(processor, preparer):
    """A marker/image count mismatch is a ValueError; a truncated image or
    a wrong digest an ImageError naming the image."""
    _, ids = _marked(processor, preparer, 1)
    small = _image("PNG", (28, 28), (1, 1, 1))
    with pytest.raises(ValueError, match="places 1 images and videos but the request carries 2"):
        preparer.prepare(ids, [_part(small)] * 2)
    from PIL import Image

    out = io.BytesIO()
    Image.effect_noise((64, 64), 80).convert("RGB").save(out, format="PNG")
    blob = out.getvalue()
    with pytest.raises(ImageError, match="image 0 is truncated or corrupt"):
        preparer.prepare(ids, [_part(blob[: len(blob) // 2])])
    with pytest.raises(ImageError, match="sha256 does not match"):
        preparer.prepare(ids, [(small, "0" * 64)])


def test_a_template_that_places_no_image_is_refused(processor, preparer):
    """A chat template that ignores image parts cannot serve images: the
    markup cannot be read, and that is an error, not a silent default."""
    from worker.vision.markup import UnsupportedProcessor

    class TextOnly:
        """A tokenizer whose template renders only text parts."""

        def apply_chat_template(self, messages, **_):
            return "".join(p.get("text", "") for p in messages[0]["content"])

        def encode(self, text, **_):
            return processor.tokenizer.encode(text, add_special_tokens=False)

    with pytest.raises(UnsupportedProcessor, match="writes nothing for an image part"):
        part_markup(TextOnly(), "image")


def _builder(processor, images):
    """A prompt builder over the tiny VLM's tokenizer (``images``: its
    preparer, or None as for a text model)."""
    from worker.prompting.builder import PromptBuilder
    from worker.prompting.model_formats import ModelFormats

    return PromptBuilder(
        processor.tokenizer,
        context_length=2048,
        default_max_tokens=8,
        vocab_size=len(processor.tokenizer),
        formats=ModelFormats(None, None, None),
        grammars=None,  # type: ignore[arg-type]  (no request here is constrained)
        images=images,
    )


def _image_request(text: str, blob: bytes, offset: int):
    """A one-turn chat request with one image at ``offset`` of ``text``."""
    from shared.protocol import ChatMessage, GenerateRequest, ImagePart, SamplingParams

    part = ImagePart(data=blob, sha256=hashlib.sha256(blob).hexdigest(), offset=offset, param="messages[0].content[1]")
    return GenerateRequest(
        request_id="r",
        sampling=SamplingParams(max_tokens=4),
        messages=[ChatMessage(role="user", content=text, images=[part])],
    )


def test_prompt_builder_places_images_and_text_models_refuse_them(processor, preparer):
    """The image's tokens stand at its offset in the text, the client's
    text stays plain text; a worker without vision refuses the request;
    a corrupt image is refused naming its request part."""
    from worker.prompting.builder import PromptError

    blob = _image("PNG", (64, 64), (9, 9, 9))
    admission = _builder(processor, preparer).build(_image_request("ab<|image_pad|>", blob, 1))
    tokenizer = processor.tokenizer
    ids = admission.vision.model_ids
    start = ids.index(tokenizer.convert_tokens_to_ids("<|vision_start|>"))
    assert tokenizer.decode(ids[start - 1 : start]) == "a"
    end = ids.index(tokenizer.convert_tokens_to_ids("<|vision_end|>"))
    assert ids[start + 1 : end] == [preparer.image_token_id] * 4
    assert tokenizer.decode(ids[end + 1 : end + 1 + 10]).startswith("b<|image_pad|>")  # typed text stays text
    assert ids.count(preparer.image_token_id) == 4
    with pytest.raises(PromptError, match="has no vision support"):
        _builder(processor, None).build(_image_request("ab", blob, 1))
    with pytest.raises(PromptError) as caught:
        _builder(processor, preparer).build(_image_request("ab", blob[:50], 1))
    assert caught.value.field == "messages[0].content[1]" and "image 0 is truncated" in caught.value.message
