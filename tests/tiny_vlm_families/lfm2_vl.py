"""The tiny LFM2-VL builder (mlx-vlm model type ``lfm2_vl``)."""

from __future__ import annotations

from pathlib import Path

from .common import save_model, train_tokenizer, write_json

LFM2_VL_ROLES = {
    "image_token": "<image>",
    "image_start_token": "<|image_start|>",
    "image_end_token": "<|image_end|>",
    "image_thumbnail_token": "<|img_thumbnail|>",
}
"""The image tokens LFM2-VL's processor reads from its tokenizer, by role."""

LFM2_VL_TILE_TOKENS = tuple(f"<|img_row_{row}_col_{col}|>" for row in range(1, 4) for col in range(1, 4))
"""LFM2-VL's tile markers for grids of up to 3x3 tiles (enough for the tile
counts of images up to a few hundred pixels here)."""

CHATML_IMAGE_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<image>{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""LFM2-VL's ChatML format; an image part is written ``<image>`` (the
processor expands it)."""


def build_tiny_lfm2_vl(out_dir: Path, seed: int = 0) -> Path:
    """Write an mlx-vlm ``lfm2_vl`` model directory with random weights to
    ``out_dir`` and return it (an existing build is reused): a 2-layer,
    64-wide LFM2 language model (one short-convolution layer, then one
    attention layer), a 1-layer 32-wide SigLIP2 (NaFlex) tower with 8-pixel
    patches pixel-unshuffled 2x2, images smart-resized to at most 4 image
    tokens (a 64x64 image becomes one 32x32 view), and a small (~350-token)
    byte-level BPE tokenizer trained here with LFM2-VL's image tokens. The
    layers' output projections are scaled x8 and the projector's output x16
    (see :mod:`tests.tiny_vlm_families`).
    mlx-vlm forces LFM2-VL's tiling on when it loads the processor, so
    images over 4096 pixels are split into 32x32 tiles (4 tokens each,
    at least 2 tiles) plus a 4-token thumbnail.

    Raises ImportError without mlx-vlm.
    """
    import mlx.core as mx
    from mlx_vlm.models import lfm2_vl

    if (out_dir / "model.safetensors").exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    specials = [
        "<|pad|>",
        "<|startoftext|>",
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        *LFM2_VL_ROLES.values(),
        *LFM2_VL_TILE_TOKENS,
    ]
    tokenizer = train_tokenizer(
        specials, LFM2_VL_ROLES, bos_token="<|startoftext|>", eos_token="<|im_end|>", pad_token="<|pad|>"
    )
    tokenizer.chat_template = CHATML_IMAGE_TEMPLATE
    tokenizer.save_pretrained(str(out_dir))
    vocab_size = len(tokenizer)
    text = {
        "model_type": "lfm2",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "layer_types": ["conv", "full_attention"],
        "intermediate_size": 128,
        "block_dim": 64,
        "block_ff_dim": 128,
        "block_multiple_of": 16,
        "block_auto_adjust_ff_dim": True,
        "conv_dim": 64,
        "conv_dim_out": 64,
        "conv_L_cache": 3,
        "num_attention_heads": 4,
        "num_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": vocab_size,
        "rope_theta": 10000.0,
        "max_position_embeddings": 2048,
        "norm_eps": 1e-5,
        "tie_word_embeddings": True,
        "eos_token_id": tokenizer.eos_token_id,
    }
    vision = {
        "model_type": "siglip2_vision_model",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "patch_size": 8,
        "num_patches": 16,
        "image_size": 32,
    }
    tiling = {
        "downsample_factor": 2,
        "encoder_patch_size": 8,
        "min_image_tokens": 1,
        "max_image_tokens": 4,
        "max_num_patches": 16,
        "max_pixels_tolerance": 4.0,
        "tile_size": 32,
        "min_tiles": 2,
        "max_tiles": 10,
        "use_thumbnail": True,
        "do_image_splitting": True,
    }
    config = {
        "model_type": "lfm2_vl",
        "architectures": ["Lfm2VlForConditionalGeneration"],
        "text_config": text,
        "vision_config": vision,
        **tiling,
        "image_token_id": tokenizer.convert_tokens_to_ids("<image>"),
        "projector_hidden_size": 64,
        "projector_bias": True,
        "projector_use_layernorm": True,
        "vision_feature_layer": -1,
        "use_image_special_tokens": True,
        "eos_token_id": tokenizer.eos_token_id,
    }
    mx.random.seed(seed)
    model_config = lfm2_vl.ModelConfig.from_dict(config)
    model_config.text_config = lfm2_vl.TextConfig.from_dict(text)
    model_config.vision_config = lfm2_vl.VisionConfig.from_dict(vision)
    model = lfm2_vl.Model(model_config)
    # at random init each layer's output is small next to the tied input
    # embedding, so every step predicts the token it was fed: scale the
    # layers' outputs up, and the image features so they steer the answer
    save_model(
        model, out_dir, {"out_proj.weight": 8.0, "w2.weight": 8.0, "multi_modal_projector.linear_2.weight": 16.0}
    )
    write_json(out_dir / "config.json", config)
    image_processor = {
        "image_processor_type": "Siglip2ImageProcessorFast",
        "processor_class": "Lfm2VlProcessor",
        **tiling,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_pad": True,
        "resample": 2,
    }
    write_json(out_dir / "preprocessor_config.json", image_processor)
    write_json(
        out_dir / "processor_config.json", {"processor_class": "Lfm2VlProcessor", "use_image_special_tokens": True}
    )
    return out_dir
