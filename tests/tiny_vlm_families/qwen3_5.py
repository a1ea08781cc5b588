"""The tiny Qwen 3.5 builder (mlx-vlm model type ``qwen3_5``)."""

from __future__ import annotations

from pathlib import Path

from .common import save_model, train_tokenizer, write_json

QWEN_VL_TOKENS = ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
"""ChatML's turn tokens and Qwen-VL's vision tokens."""

QWEN_VL_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif part['type'] == 'video' %}"
    "<|vision_start|><|video_pad|><|vision_end|>{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""Qwen-VL's ChatML format; an image part is written
``<|vision_start|><|image_pad|><|vision_end|>`` (the processor repeats the
pad token), a video part likewise with ``<|video_pad|>``."""


def build_tiny_qwen3_5(out_dir: Path, seed: int = 0) -> Path:
    """Write an mlx-vlm ``qwen3_5`` model directory with random weights to
    ``out_dir`` and return it (an existing build is reused): a 2-layer,
    64-wide Qwen 3.5 language model (a gated-delta-net linear-attention
    layer, then a gated full-attention layer with interleaved M-RoPE), a
    1-block 32-wide Qwen3-VL vision tower without deepstack (16-pixel
    patches merged 2x2; images resized to at most 64x64, so at most 4
    image tokens), and a small (~350-token) byte-level BPE tokenizer trained here
    with Qwen-VL's vision tokens. The layers' output projections are scaled
    x8 and the vision merger's output x16 (see :mod:`tests.tiny_vlm_families`).

    Raises ImportError without mlx-vlm.
    """
    import mlx.core as mx
    from mlx_vlm.models import qwen3_5

    if (out_dir / "model.safetensors").exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    specials = ["<|endoftext|>", *QWEN_VL_TOKENS]
    tokenizer = train_tokenizer(specials, {}, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = QWEN_VL_TEMPLATE
    tokenizer.save_pretrained(str(out_dir))
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in QWEN_VL_TOKENS}
    vocab_size = len(tokenizer)
    eos = ids["<|im_end|>"]
    text = {
        "model_type": "qwen3_5_text",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "full_attention_interval": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "linear_num_value_heads": 4,
        "linear_num_key_heads": 2,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_conv_kernel_dim": 4,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab_size,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": True,
        "eos_token_id": eos,
        "rope_parameters": {
            "type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": [2, 1, 1],
            "mrope_interleaved": True,
        },
    }
    vision = qwen3_vl_tower("qwen3_5")
    config = {
        "model_type": "qwen3_5",
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "text_config": text,
        "vision_config": vision,
        "tie_word_embeddings": True,
        "vocab_size": vocab_size,
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "eos_token_id": [eos],
    }
    mx.random.seed(seed)
    model = qwen3_5.Model(qwen3_5.ModelConfig.from_dict(config))
    save_model(model, out_dir, QWEN3_5_SCALES)
    write_json(out_dir / "config.json", config)
    write_qwen3_vl_processor(out_dir)
    return out_dir


QWEN3_5_SCALES = {
    "out_proj.weight": 8.0,
    "o_proj.weight": 8.0,
    "down_proj.weight": 8.0,
    "merger.linear_fc2.weight": 16.0,
}
"""As for LFM2-VL: the layers' outputs and the image features scaled up, so
the image changes a random model's answer (Qwen 3.5 and Qwen 3.5 MoE)."""


def qwen3_vl_tower(model_type: str) -> dict:
    """The config of a 1-block, 32-wide Qwen3-VL vision tower without
    deepstack (16-pixel patches merged 2x2, 64 wide out) named
    ``model_type``: the tower of the tiny Qwen 3.5, Qwen 3.5 MoE and
    Qwen3-Omni."""
    return {
        "model_type": model_type,
        "depth": 1,
        "hidden_size": 32,
        "intermediate_size": 64,
        "out_hidden_size": 64,
        "num_heads": 2,
        "patch_size": 16,
        "spatial_patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "in_channels": 3,
        "num_position_embeddings": 64,
        "deepstack_visual_indexes": [],
    }


def write_qwen3_vl_processor(out_dir: Path) -> None:
    """Write Qwen3-VL's processor configs to ``out_dir`` (images and videos
    resized to 32x32 ... 64x64 pixels, so at most 4 image tokens)."""
    image_processor = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen3VLProcessor",
        "patch_size": 16,
        "merge_size": 2,
        "temporal_patch_size": 2,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "min_pixels": 32 * 32,
        "max_pixels": 64 * 64,
    }
    write_json(out_dir / "preprocessor_config.json", image_processor)
    write_json(out_dir / "video_preprocessor_config.json", image_processor)
    write_json(out_dir / "processor_config.json", {"processor_class": "Qwen3VLProcessor"})
