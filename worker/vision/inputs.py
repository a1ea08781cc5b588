"""Preparing a vision request's images on the worker's input thread: decode
them under limits, run the model's image processor, and lay out the prompt
twice: the ids the model reads (each image's placeholder expanded to the
number of tokens the model gives it) and the ids the prefix cache keys on
(those placeholders replaced by ids derived from the image's content).

No MLX is touched here (mlx-vlm's processors convert their output to MLX
arrays, so this module calls the processor's image processor alone): the
scheduler thread turns the NumPy arrays into MLX inputs. Supported
processors are those of the Qwen-VL family (an image processor with a
``merge_size`` returning ``pixel_values`` and ``image_grid_thw``, and an
``image_token``), which is what mlx-vlm's ``qwen2_vl``, ``qwen2_5_vl`` and
``qwen3_vl`` models use.

Content keys: the cache key of an image's ``j``-th token is
``vocab_size + H(sha256, j)`` with ``H`` 30 bits of a SHA-256, so two
requests share a cached prefix through an image only when the image bytes
are equal (a false match needs every one of the image's token keys to
collide). Key ids are never fed to the model.
"""

from __future__ import annotations

import hashlib
from typing import Any

from worker.messages import VisionPrompt
from worker.vision.images import DEFAULT_LIMITS, ImageLimits, decode_images

KEY_BITS = 30
"""Bits of an image token's cache key above the vocabulary."""


class UnsupportedProcessor(TypeError):
    """The model's processor is not one this module knows how to drive
    without MLX (see the module docstring)."""


class ImagePreparer:
    """Drives one model's processor (built once per worker, used by the
    input thread only). ``vocab_size`` is where cache keys start.

    Raises:
        UnsupportedProcessor: at construction, for a processor outside the
            Qwen-VL family.
    """

    def __init__(self, processor: Any, vocab_size: int, limits: ImageLimits = DEFAULT_LIMITS) -> None:
        image_processor = getattr(processor, "image_processor", None)
        token = getattr(processor, "image_token", None)
        merge = getattr(image_processor, "merge_size", None)
        if image_processor is None or not isinstance(token, str) or not isinstance(merge, int):
            raise UnsupportedProcessor(f"the {type(processor).__name__} processor is not supported for images")
        tokenizer = getattr(processor, "tokenizer", processor)
        self.image_token = token
        self.image_token_id = int(tokenizer.convert_tokens_to_ids(token))
        self._image_processor = image_processor
        self._merge = merge
        self.vocab_size = vocab_size
        self.limits = limits

    def prepare(self, ids: list[int], blobs: list[tuple[bytes, str]]) -> tuple[list[int], VisionPrompt]:
        """The cache-key prompt and the :class:`VisionPrompt` for ``ids``, a
        prompt holding one ``-(k + 1)`` marker where image ``k`` of
        ``blobs`` (its bytes and SHA-256 hex digest) stands.

        Raises:
            worker.vision.images.ImageError: an image is unusable (names it), or
                its digest does not match its bytes.
            ValueError: the markers do not match the images.
        """
        for index, (blob, digest) in enumerate(blobs):
            if hashlib.sha256(blob).hexdigest() != digest:
                from worker.vision.images import ImageError

                raise ImageError(f"image {index}'s sha256 does not match its bytes", index)
        pictures = decode_images([blob for blob, _ in blobs], self.limits)
        features = self._image_processor(images=pictures)
        pixels, grids = features["pixel_values"], features["image_grid_thw"]
        counts = [int(grid.prod()) // (self._merge * self._merge) for grid in grids]
        model_ids: list[int] = []
        key_ids: list[int] = []
        seen = 0
        image_end = 0
        for token in ids:
            if token >= 0:
                model_ids.append(token)
                key_ids.append(token)
                continue
            k = -token - 1
            if k != seen or k >= len(blobs):
                raise ValueError("the prompt's image markers do not match the request's images")
            seen += 1
            model_ids += [self.image_token_id] * counts[k]
            key_ids += image_keys(blobs[k][1], counts[k], self.vocab_size)
            image_end = len(model_ids)
        if seen != len(blobs):
            raise ValueError(f"the prompt places {seen} images but the request carries {len(blobs)}")
        return key_ids, VisionPrompt(model_ids, pixels, grids, image_end, self.image_token_id)


def image_keys(digest: str, count: int, vocab_size: int) -> list[int]:
    """The ``count`` cache-key ids of an image with SHA-256 ``digest`` (see
    the module docstring)."""
    mask = (1 << KEY_BITS) - 1
    keys = []
    for j in range(count):
        h = hashlib.sha256(f"{digest}:{j}".encode()).digest()
        keys.append(vocab_size + (int.from_bytes(h[:4], "big") & mask))
    return keys


def image_markup(tokenizer: Any, image_token_id: int) -> tuple[list[int], list[int]]:
    """The ids the chat template puts before and after an image's token
    (Qwen-VL: ``<|vision_start|>`` and ``<|vision_end|>``), read by
    rendering a one-image user turn and a text-only one and tokenizing
    what differs.

    Raises:
        UnsupportedProcessor: the template does not render content-part
            lists, or does not place exactly one image token for an image
            (the model could not be given images faithfully).
    """
    try:
        with_image, without = (
            tokenizer.apply_chat_template(
                [{"role": "user", "content": content}], add_generation_prompt=False, tokenize=False
            )
            for content in ([{"type": "image"}, {"type": "text", "text": "."}], [{"type": "text", "text": "."}])
        )
    except Exception as exc:  # a template without content-part lists
        raise UnsupportedProcessor(f"the chat template cannot render an image part: {exc}") from None
    start = 0
    while start < min(len(with_image), len(without)) and with_image[start] == without[start]:
        start += 1
    end = 0
    while end < len(without) - start and with_image[len(with_image) - 1 - end] == without[len(without) - 1 - end]:
        end += 1
    ids = list(tokenizer.encode(with_image[start : len(with_image) - end], add_special_tokens=False))
    if ids.count(image_token_id) != 1:
        raise UnsupportedProcessor("the chat template does not place one image token for an image part")
    at = ids.index(image_token_id)
    return ids[:at], ids[at + 1 :]
