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


AUDIO_ROLES = {
    "audio_token": "<audio_soft_token>",
    "boa_token": "<start_of_audio>",
    "eoa_token": "<end_of_audio>",
    "image_token": "<image_soft_token>",
    "boi_token": "<start_of_image>",
    "eoi_token": "<end_of_image>",
}
"""The special tokens a Gemma 4 processor reads from its tokenizer, by role."""

AUDIO_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<start_of_turn>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'audio' %}<audio_soft_token>{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
"""A Gemma-style template whose content-part lists place the audio token
where each ``{"type": "audio"}`` part stands (the processor expands it)."""


def build_tiny_audio_vlm(out_dir: Path, seed: int = 0) -> Path:
    """Write an mlx-vlm ``gemma4`` model directory with an audio tower and
    random weights to ``out_dir`` and return it (an existing build is
    reused): a 3-layer, 64-wide language model (sliding-window layers of
    64 tokens and full-attention layers alternating; the last layer reuses
    an earlier layer's keys and values, as Gemma 4's KV-shared layers do),
    1-layer vision and audio towers, and a 400-token byte-level BPE
    tokenizer trained here.

    Raises ImportError without mlx-vlm.
    """
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_vlm.models import gemma4
    from mlx_vlm.models.gemma4.config import AudioConfig, TextConfig, VisionConfig
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if (out_dir / "model.safetensors").exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", *AUDIO_ROLES.values()]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = ["What is said in this clip? Listen to the audio and answer. Hi there, hello."] * 20
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<bos>",
        eos_token="<end_of_turn>",
        pad_token="<pad>",
        unk_token="<unk>",
        extra_special_tokens=AUDIO_ROLES,
    )
    tokenizer.chat_template = AUDIO_TEMPLATE
    tokenizer.save_pretrained(str(out_dir))
    ids = {role: tokenizer.convert_tokens_to_ids(token) for role, token in AUDIO_ROLES.items()}
    vocab_size = len(tokenizer)
    text = {
        "model_type": "gemma4_text",
        "hidden_size": 64,
        "num_hidden_layers": 3,
        "intermediate_size": 128,
        "num_attention_heads": 2,
        "head_dim": 16,
        "global_head_dim": 16,
        "num_key_value_heads": 1,
        "vocab_size": vocab_size,
        "vocab_size_per_layer_input": vocab_size,
        "hidden_size_per_layer_input": 16,
        "num_kv_shared_layers": 1,
        "sliding_window": 64,
        "sliding_window_pattern": 2,
        "use_double_wide_mlp": False,
    }
    config = {
        "model_type": "gemma4",
        "text_config": text,
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "vision_config": {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "global_head_dim": 16,
        },
        "audio_config": {
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "subsampling_conv_channels": [16, 8],
            "output_proj_dims": 32,
        },
        **{f"{role}_id": ids[role] for role in AUDIO_ROLES},
        "eos_token_id": [tokenizer.convert_tokens_to_ids("<end_of_turn>")],
    }
    mx.random.seed(seed)
    model_config = gemma4.ModelConfig.from_dict(config)
    # from_dict leaves the nested configs as dicts (mlx_vlm.load converts them the same way)
    model_config.text_config = TextConfig.from_dict(text)
    model_config.vision_config = VisionConfig.from_dict(config["vision_config"])
    model_config.audio_config = AudioConfig.from_dict(config["audio_config"])
    model = gemma4.Model(model_config)
    mx.save_safetensors(str(out_dir / "model.safetensors"), dict(tree_flatten(model.parameters())))
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    processor = {"processor_class": "Gemma4Processor", "audio_seq_length": 750, "audio_ms_per_token": 40}
    (out_dir / "processor_config.json").write_text(json.dumps(processor, indent=2))
    return out_dir
