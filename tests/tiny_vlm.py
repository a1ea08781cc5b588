"""A tiny random-weight vision-language model for fast tests.

A Qwen2-VL-style model (mlx-vlm's ``qwen2_vl`` classes) with a 2-layer,
64-wide language model and a 1-block vision tower, reusing the default
model's tokenizer plus Qwen2-VL's image tokens and a chat template that
places them. Everything is built offline; deterministic for a given seed.
Needs the ``vision`` extra (mlx-vlm).
"""

from __future__ import annotations

import json
from pathlib import Path

from shared.config import DEFAULT_MODEL_SOURCE

IMAGE_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
"""Qwen2-VL's vision tokens, added to the reused tokenizer as special tokens."""

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A ChatML template whose content-part lists place an image's tokens where
each ``{"type": "image"}`` part stands."""

PIXELS = {"min_pixels": 28 * 28, "max_pixels": 56 * 56}
"""The image processor's bounds: every image is resized to at most 56x56
pixels, so it costs at most 4 merged image tokens."""


def build_tiny_vlm(out_dir: Path, seed: int = 0) -> Path:
    """Write an mlx-vlm ``qwen2_vl`` model directory with random weights to
    ``out_dir`` and return it (an existing build is reused).

    Raises ImportError without mlx-vlm, and whatever the default model's
    resolution raises when its tokenizer is not prepared.
    """
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_vlm.models import qwen2_vl
    from transformers import AutoTokenizer

    from worker.loader import resolve_source

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
    config = {
        "model_type": "qwen2_vl",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab_size,
        "max_position_embeddings": 2048,
        "rope_theta": 10000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
        "tie_word_embeddings": True,
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "eos_token_id": eos,
        "vision_config": {
            "model_type": "qwen2_vl",
            "depth": 1,
            "embed_dim": 32,
            "hidden_size": 64,
            "num_heads": 2,
            "patch_size": 14,
            "spatial_patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "in_channels": 3,
            "mlp_ratio": 2,
        },
    }
    mx.random.seed(seed)
    model_config = qwen2_vl.ModelConfig.from_dict(dict(config))
    model_config.vision_config = qwen2_vl.VisionConfig.from_dict(config["vision_config"])
    model_config.text_config = qwen2_vl.TextConfig.from_dict(config)
    model = qwen2_vl.Model(model_config)
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(out_dir / "model.safetensors"), weights)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    image_processor = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen2VLProcessor",
        "patch_size": 14,
        "merge_size": 2,
        "temporal_patch_size": 2,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        **PIXELS,
    }
    (out_dir / "preprocessor_config.json").write_text(json.dumps(image_processor, indent=2))
    (out_dir / "processor_config.json").write_text(json.dumps({"processor_class": "Qwen2VLProcessor"}, indent=2))
    (out_dir / "video_preprocessor_config.json").write_text(json.dumps(image_processor, indent=2))
    return out_dir
