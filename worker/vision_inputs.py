"""Preparing a vision request's inputs on the worker's input thread: the
prompt's token ids with each image's placeholder expanded to the number of
tokens the model gives it, and the preprocessed pixels as NumPy arrays.

No MLX is touched here (mlx-vlm's processors convert their output to MLX
arrays, so this module calls the processor's tokenizer and image
processor separately): the scheduler thread turns the arrays into MLX
inputs. Supported processors are those of the Qwen-VL family (an image
processor with a ``merge_size`` returning ``pixel_values`` and
``image_grid_thw``, and an ``image_token``), which is what mlx-vlm's
``qwen2_vl``, ``qwen2_5_vl`` and ``qwen3_vl`` models use.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from worker.images import DEFAULT_LIMITS, ImageLimits, decode_images


class UnsupportedProcessor(TypeError):
    """The model's processor is not one this module knows how to drive
    without MLX (see the module docstring)."""


@dataclass(frozen=True)
class VisionInputs:
    """One request's model inputs: ``prompt`` token ids (image placeholders
    expanded), ``pixel_values`` and ``image_grid_thw`` (NumPy arrays, None
    without images) and ``image_key``: a SHA-256 of the preprocessed
    pixels and grids, so two requests with the same images share a key
    (empty without images)."""

    prompt: list[int]
    pixel_values: Any = None
    image_grid_thw: Any = None
    image_key: str = ""


def prepare(processor: Any, prompt_text: str, blobs: list[bytes], limits: ImageLimits = DEFAULT_LIMITS) -> VisionInputs:
    """The inputs for ``prompt_text`` (a rendered chat prompt holding one
    ``processor.image_token`` per image, in order) and the images' bytes.

    Raises:
        worker.images.ImageError: an image is unusable (names it).
        ValueError: the prompt's image placeholders do not match the
            number of images.
        UnsupportedProcessor: the processor is not of the Qwen-VL family.
    """
    image_processor = getattr(processor, "image_processor", None)
    token = getattr(processor, "image_token", None)
    merge = getattr(image_processor, "merge_size", None)
    if image_processor is None or not isinstance(token, str) or not isinstance(merge, int):
        raise UnsupportedProcessor(f"the {type(processor).__name__} processor is not supported for images")
    placeholders = prompt_text.count(token)
    if placeholders != len(blobs):
        raise ValueError(f"the prompt places {placeholders} images but the request carries {len(blobs)}")
    tokenizer = getattr(processor, "tokenizer", processor)
    if not blobs:
        return VisionInputs(prompt=list(tokenizer(prompt_text, add_special_tokens=False)["input_ids"]))
    pictures = decode_images(blobs, limits)
    features = image_processor(images=pictures)
    pixels, grids = features["pixel_values"], features["image_grid_thw"]
    pieces = prompt_text.split(token)
    expanded = pieces[0]
    for grid, piece in zip(grids, pieces[1:]):
        expanded += token * (int(grid.prod()) // (merge * merge)) + piece
    ids = list(tokenizer(expanded, add_special_tokens=False)["input_ids"])
    digest = hashlib.sha256()
    for array in (pixels, grids):
        digest.update(str(array.shape).encode())
        digest.update(array.tobytes())
    return VisionInputs(prompt=ids, pixel_values=pixels, image_grid_thw=grids, image_key=digest.hexdigest())
