"""Cross-attention vision models on the batch engine: mlx-vlm's ``mllama`` (Llama 3.2 Vision).

Such a model does not read an image through tokens of its sequence: a
few of its decoder layers attend, at every position and every decoding
step, to the image's vision features. The batch engine feeds text tokens
only, so here each cross-attention layer's engine cache is an mlx-lm
``ArraysCache`` of four arrays (:data:`SLOTS`): the image's keys and
values as that layer projects them (computed once, at the image's
prefill), the additive mask of the image's padded tiles, and whether
the sequence has an image (1) or not (0). Kept with the sequence's other
caches, they batch (merge, filter, extend), go to the prefix cache and
the disk tier, and come back after a rejected draft like a recurrent
layer's state; a cached prefix that holds the image holds its keys and
values.

:func:`forward` runs the language model's layers (the library's own
modules) on a batch with those caches: self-attention layers at each
row's own position (mlx-vlm's layers take one position for the whole
batch), cross-attention layers against each row's stored image. A row
without an image passes the cross-attention layers unchanged, as the
model's reference implementation (transformers) skips them for text;
mlx-vlm 0.7.10 instead attends each text token to itself there. Tokens
after the image attend to its real tiles only, at decoding too (the
reference's rule; mlx-vlm's own generation drops the tile mask after the
prompt, which differs only for an image that fills fewer tiles than the
model's maximum).

The prompt holding the image is prefilled by mlx-vlm's own model call
(:meth:`worker.vision.model.VisionLanguageModel.prefill_images`);
:func:`prompt_mask` builds the per-token image mask that call takes for
the prompt the worker laid out, and :func:`store_image` then keeps each
layer's keys and values. One image per request
(:data:`worker.vision.inputs.ONE_IMAGE`): the stored arrays of every
sequence must have one shape to batch.

Scheduler thread only (MLX).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

CROSS_ATTENTION = frozenset({"mllama"})
"""mlx-vlm ``model_type`` values whose images are read by cross-attention
layers (served through this module)."""

SLOTS = 4
"""Arrays in a cross-attention layer's cache: keys, values, tile mask, has-image."""


def cross_layers(vlm: Any) -> frozenset[int]:
    """The indices of ``vlm``'s cross-attention decoder layers (empty for a
    model without any)."""
    text = getattr(vlm.config, "text_config", None)
    return frozenset(int(i) for i in (getattr(text, "cross_attention_layers", None) or []))


def image_tokens(vlm: Any) -> int:
    """How many vision positions one image gives each cross-attention layer:
    every tile the model can take (padded tiles included), each its patches
    and a class position."""
    vision = vlm.config.vision_config
    return int(vision.max_num_tiles) * ((int(vision.image_size) // int(vision.patch_size)) ** 2 + 1)


def prompt_mask(model_ids: list[int], image_token_id: int, aspect_ratio_mask: Any) -> mx.array:
    """The cross-attention mask mlx-vlm's model takes for a prompt
    (``[1, tokens, 1, tiles]``, 1 where a token sees a tile): every token
    from the image's token on sees the image's real tiles
    (``aspect_ratio_mask``, the processor's ``[1, 1, tiles]``), tokens
    before it see none.

    Raises:
        ValueError: the prompt does not hold exactly one image token.
    """
    if model_ids.count(image_token_id) != 1:
        raise ValueError(f"a cross-attention prompt holds one image token, this one {model_ids.count(image_token_id)}")
    tiles = mx.array(aspect_ratio_mask).reshape(-1).astype(mx.float32)
    after = (mx.arange(len(model_ids)) >= model_ids.index(image_token_id)).astype(mx.float32)
    return (after[:, None] * tiles[None])[None, :, None, :]


def store_image(vlm: Any, cache: list[Any], states: mx.array, mask: mx.array) -> None:
    """Keep, in each cross-attention layer's cache of one sequence
    (``cache``, fresh), the keys and values that layer projects from the
    image's vision ``states`` (``[1, positions, hidden]``, as mlx-vlm's
    ``get_input_embeddings`` returns them), the prepared mask of the
    prompt's last token (``mask``, ``[1, 1, tokens, positions]``, additive:
    0 for a real tile's position, a large negative number for a padded
    one's) and the has-image flag."""
    layers = vlm.language_model.model.layers
    for index in sorted(cross_layers(vlm)):
        attention = layers[index].cross_attn
        batch = states.shape[0]
        keys = attention.k_proj(states).reshape(batch, -1, attention.num_key_value_heads, attention.head_dim)
        values = attention.v_proj(states).reshape(batch, -1, attention.num_key_value_heads, attention.head_dim)
        slot = cache[index]
        slot[0] = attention.k_norm(keys.transpose(0, 2, 1, 3))
        slot[1] = values.transpose(0, 2, 1, 3)
        slot[2] = mask[:, :, -1:, :].astype(slot[0].dtype)
        slot[3] = mx.ones((batch, 1, 1, 1), dtype=slot[0].dtype)


def _fill_empty(vlm: Any, slot: Any, rows: int, dtype: Any) -> None:
    """Give a cross-attention cache that holds nothing yet (text-only
    sequences) ``rows`` rows of no image: zero keys and values of the
    image's shape, no tile mask, flag 0."""
    attention_heads = vlm.config.text_config.num_key_value_heads
    head_dim = vlm.config.text_config.hidden_size // vlm.config.text_config.num_attention_heads
    shape = (rows, attention_heads, image_tokens(vlm), head_dim)
    slot[0] = mx.zeros(shape, dtype=dtype)
    slot[1] = mx.zeros(shape, dtype=dtype)
    slot[2] = mx.zeros((rows, 1, 1, shape[2]), dtype=dtype)
    slot[3] = mx.zeros((rows, 1, 1, 1), dtype=dtype)


def forward(vlm: Any, inputs: mx.array, cache: list[Any]) -> mx.array:
    """The logits of ``inputs`` (``[batch, length]`` text token ids) through
    ``vlm``'s language model on the batch engine's ``cache`` (see the
    module docstring), each row at its own cache offset."""
    from mlx_lm.models.base import create_attention_mask, scaled_dot_product_attention

    language = vlm.language_model
    crossed = cross_layers(vlm)
    hidden = language.model.embed_tokens(inputs)
    batch, length, _ = hidden.shape
    first_self = next(i for i in range(len(cache)) if i not in crossed)
    mask = create_attention_mask(hidden, cache[first_self])
    for index, (layer, layer_cache) in enumerate(zip(language.model.layers, cache)):
        if index in crossed:
            if layer_cache[0] is None:
                _fill_empty(vlm, layer_cache, batch, hidden.dtype)
            hidden = _cross_layer(layer, hidden, layer_cache)
            continue
        attention = layer.self_attn
        x = layer.input_layernorm(hidden)
        queries, keys, values = (
            proj(x).reshape(batch, length, heads, -1).transpose(0, 2, 1, 3)
            for proj, heads in (
                (attention.q_proj, attention.num_heads),
                (attention.k_proj, attention.num_key_value_heads),
                (attention.v_proj, attention.num_key_value_heads),
            )
        )
        offset = layer_cache.offset
        queries = attention.rope(queries, offset=offset)
        keys = attention.rope(keys, offset=offset)
        keys, values = layer_cache.update_and_fetch(keys, values)
        out = scaled_dot_product_attention(queries, keys, values, cache=layer_cache, scale=attention.scale, mask=mask)
        hidden = hidden + attention.o_proj(out.transpose(0, 2, 1, 3).reshape(batch, length, -1))
        hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
    return language.lm_head(language.model.norm(hidden))


def _cross_layer(layer: Any, hidden: mx.array, slot: Any) -> mx.array:
    """One cross-attention decoder layer of ``hidden`` against each row's
    stored image (``slot``); a row without one comes out unchanged (zero
    keys and values attend to nothing, and its MLP is masked out)."""
    attention = layer.cross_attn
    batch, length, _ = hidden.shape
    x = layer.input_layernorm(hidden)
    queries = attention.q_norm(
        attention.q_proj(x).reshape(batch, length, attention.num_heads, attention.head_dim).transpose(0, 2, 1, 3)
    )
    keys, values, tiles, has_image = slot[0], slot[1], slot[2], slot[3]
    out = mx.fast.scaled_dot_product_attention(
        queries, keys, values, scale=attention.scale, mask=tiles.astype(queries.dtype)
    )
    hidden = hidden + mx.tanh(layer.cross_attn_attn_gate) * attention.o_proj(
        out.transpose(0, 2, 1, 3).reshape(batch, length, -1)
    )
    mlp = layer.mlp(layer.post_attention_layernorm(hidden)) * has_image[:, 0]
    return hidden + mx.tanh(layer.cross_attn_mlp_gate) * mlp
