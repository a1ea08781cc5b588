"""A tiny random-weight vision-language model for fast tests.

A Qwen3-VL-style model (mlx-vlm's ``qwen3_vl`` classes) with a 2-layer,
64-wide language model and a 2-block vision tower, reusing the default
model's tokenizer plus Qwen-VL's image tokens and a chat template that
places them. Everything is built offline; deterministic for a given seed.
Needs the ``vision`` extra (mlx-vlm). Qwen3-VL rather than Qwen2-VL:
mlx-vlm 0.7's continuous batching (its ``BatchGenerator``) runs
``qwen3_vl`` but not ``qwen2_vl``, whose forward pass takes the input
embeddings twice.
"""

from __future__ import annotations

import json
from pathlib import Path

from shared.config import DEFAULT_MODEL_SOURCE

IMAGE_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
"""Qwen-VL's vision tokens, added to the reused tokenizer as special tokens."""

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif part['type'] == 'video' %}"
    "<|vision_start|><|video_pad|><|vision_end|>{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A ChatML template whose content-part lists place an image's tokens where
each ``{"type": "image"}`` part stands, and a video's (as Qwen3-VL's
template does) where each ``{"type": "video"}`` part stands."""

PIXELS = {"min_pixels": 32 * 32, "max_pixels": 64 * 64}
"""The image processor's bounds: every image is resized to at most 64x64
pixels (16-pixel patches merged 2x2), so it costs at most 4 image tokens."""


def build_tiny_vlm(out_dir: Path, seed: int = 0) -> Path:
    """Write an mlx-vlm ``qwen3_vl`` model directory with random weights to
    ``out_dir`` and return it (an existing build is reused).

    Raises ImportError without mlx-vlm, and whatever the default model's
    resolution raises when its tokenizer is not prepared.
    """
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_vlm.models import qwen3_vl
    from transformers import AutoTokenizer

    from worker.loading.loader import resolve_source

    if (out_dir / "model.safetensors").exists():
        return out_dir
    source = resolve_source(DEFAULT_MODEL_SOURCE)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(source))
    tokenizer.add_special_tokens({"additional_special_tokens": list(IMAGE_TOKENS)})
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(str(out_dir))
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in IMAGE_TOKENS}
    vocab_size = len(tokenizer)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    text = {
        "model_type": "qwen3_vl",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab_size,
        "max_position_embeddings": 2048,
        "rope_theta": 10000.0,
        "rope_scaling": {"type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True},
        "tie_word_embeddings": True,
    }
    config = {
        "model_type": "qwen3_vl",
        "text_config": text,
        "tie_word_embeddings": True,
        "vocab_size": vocab_size,
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "eos_token_id": eos,
        "vision_config": {
            "model_type": "qwen3_vl",
            "depth": 2,
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
            "deepstack_visual_indexes": [1],
        },
    }
    mx.random.seed(seed)
    model = qwen3_vl.Model(qwen3_vl.ModelConfig.from_dict(config))
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(out_dir / "model.safetensors"), weights)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    image_processor = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen3VLProcessor",
        "patch_size": 16,
        "merge_size": 2,
        "temporal_patch_size": 2,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        **PIXELS,
    }
    (out_dir / "preprocessor_config.json").write_text(json.dumps(image_processor, indent=2))
    (out_dir / "processor_config.json").write_text(json.dumps({"processor_class": "Qwen3VLProcessor"}, indent=2))
    (out_dir / "video_preprocessor_config.json").write_text(json.dumps(image_processor, indent=2))
    return out_dir
