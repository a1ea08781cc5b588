"""A media prompt's embeddings as the model's reference implementation computes them, where mlx-vlm's differ.

A prompt with media is prefilled from mlx-vlm's ``get_input_embeddings``
(:meth:`worker.vision.model.VisionLanguageModel.prefill_images`); every
other token (a prompt without media, each decoded token) goes into the
language model as an id. For the families in :data:`TEXT_SCALE` the two
disagree about text tokens: mlx-vlm 0.7.10's Gemma 3n looks a prompt's
text tokens up without the square root of the hidden size by which its
language model scales ids (and the reference implementation, transformers,
every text token), so a media prompt's text would weigh about 1/45 of
the same text given as ids on the real models. :func:`as_reference`
scales them back; the media's own embeddings stay as mlx-vlm makes them.

Scheduler thread only (MLX).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

TEXT_SCALE = frozenset({"gemma3n"})
"""mlx-vlm ``model_type`` values whose ``get_input_embeddings`` leaves the
text tokens unscaled (see the module docstring)."""


def as_reference(family: str, vlm: Any, ids: mx.array, embeddings: mx.array) -> mx.array:
    """``embeddings`` (``get_input_embeddings``' output for ``ids``) with
    the text tokens' rows scaled as the language model scales ids, for a
    ``family`` in :data:`TEXT_SCALE` (text: ids below the model's first
    media id, ``embed_vision.vocab_offset``); as given for any other."""
    if family not in TEXT_SCALE:
        return embeddings
    text = ids < int(vlm.embed_vision.vocab_offset)
    scale = float(vlm.config.text_config.hidden_size) ** 0.5
    return mx.where(text[..., None], embeddings * scale, embeddings)
