"""The tiny Qwen2-VL builder (mlx-vlm model type ``qwen2_vl``), and the
pieces the Qwen2.5-VL builder shares with it: the tokenizer, the flat
config layout and the processor configs."""

from __future__ import annotations

from pathlib import Path

from .common import save_model, train_tokenizer, write_json
from .qwen3_5 import QWEN_VL_TEMPLATE, QWEN_VL_TOKENS

QWEN2_VL_PIXELS = {"min_pixels": 32 * 32, "max_pixels": 64 * 64}
"""The image and video processors' bounds: an image is resized to at most
64x64 pixels (16-pixel patches merged 2x2, so at most 4 image tokens); for a
video the bound is on frames x height x width, so a clip's frames shrink to
32x32 (one token per pair of frames)."""


def qwen_vl_tokenizer(out_dir: Path) -> tuple[dict[str, int], int]:
    """Train the small byte-level BPE tokenizer with ChatML's and Qwen-VL's
    vision tokens (:data:`~tests.tiny_vlm_families.qwen3_5.QWEN_VL_TOKENS`,
    ``<|endoftext|>`` as padding, ``<|im_end|>`` as end of sequence) and the
    Qwen-VL chat template, save it to ``out_dir``, and return the ids of
    those tokens by token and the vocabulary size."""
    tokenizer = train_tokenizer(
        ["<|endoftext|>", *QWEN_VL_TOKENS], {}, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.chat_template = QWEN_VL_TEMPLATE
    tokenizer.save_pretrained(str(out_dir))
    return {token: tokenizer.convert_tokens_to_ids(token) for token in QWEN_VL_TOKENS}, len(tokenizer)


def qwen_vl_config(model_type: str, ids: dict[str, int], vocab_size: int, vision: dict) -> dict:
    """Return the ``config.json`` of a tiny Qwen2-VL-layout model of
    ``model_type``: as in the real checkpoints the language model's fields
    sit at the top level (mlx-vlm's ``ModelConfig.from_dict`` copies them
    into ``text_config``): 2 layers, 64 wide, 4 heads of 16 (2 key-value
    heads), chunked M-RoPE sections ``[2, 3, 3]``, an untied output head,
    the vision token ids from ``ids`` and ``vision`` as ``vision_config``."""
    return {
        "model_type": model_type,
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
        "tie_word_embeddings": False,
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "eos_token_id": [ids["<|im_end|>"]],
        "vision_config": vision,
    }


def write_qwen_vl_processor_configs(out_dir: Path, processor_class: str) -> None:
    """Write ``preprocessor_config.json``, ``video_preprocessor_config.json``
    and ``processor_config.json`` for ``processor_class`` to ``out_dir``:
    16-pixel patches merged 2x2, pairs of frames, the bounds of
    :data:`QWEN2_VL_PIXELS`. All three are written so mlx-vlm finds them
    locally (it asks the Hub for any it cannot find on disk)."""
    image_processor = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": processor_class,
        "patch_size": 16,
        "merge_size": 2,
        "temporal_patch_size": 2,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        **QWEN2_VL_PIXELS,
    }
    video_processor = {
        **image_processor,
        "video_processor_type": "Qwen2VLVideoProcessor",
        "fps": 2.0,
        "min_frames": 4,
        "max_frames": 8,
    }
    del video_processor["image_processor_type"]
    write_json(out_dir / "preprocessor_config.json", image_processor)
    write_json(out_dir / "video_preprocessor_config.json", video_processor)
    write_json(out_dir / "processor_config.json", {"processor_class": processor_class})


def build_tiny_qwen2_vl(out_dir: Path, seed: int = 0) -> Path:
    """Write an mlx-vlm ``qwen2_vl`` model directory with random weights to
    ``out_dir`` and return it (an existing build is reused): a 2-layer,
    64-wide Qwen2 language model with chunked M-RoPE, a 1-block 32-wide
    Qwen2-VL vision tower (16-pixel patches over pairs of frames, merged
    2x2; images resized to at most 64x64, so at most 4 image tokens), and a
    small (~350-token) byte-level BPE tokenizer trained here with Qwen-VL's
    vision tokens and chat template. No weights are scaled: with the
    untied output head the image (or video) already changes the answer.

    Raises ImportError without mlx-vlm.
    """
    import mlx.core as mx
    from mlx_vlm.models import qwen2_vl

    if (out_dir / "model.safetensors").exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    ids, vocab_size = qwen_vl_tokenizer(out_dir)
    vision = {
        "model_type": "qwen2_vl",
        "depth": 1,
        "embed_dim": 32,
        "hidden_size": 64,
        "num_heads": 2,
        "mlp_ratio": 2,
        "patch_size": 16,
        "spatial_patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "in_channels": 3,
    }
    config = qwen_vl_config("qwen2_vl", ids, vocab_size, vision)
    config["architectures"] = ["Qwen2VLForConditionalGeneration"]
    mx.random.seed(seed)
    model_config = qwen2_vl.ModelConfig.from_dict(dict(config))
    model_config.text_config = qwen2_vl.TextConfig.from_dict(model_config.text_config)
    model_config.vision_config = qwen2_vl.VisionConfig.from_dict(vision)
    model = qwen2_vl.Model(model_config)
    save_model(model, out_dir)
    write_json(out_dir / "config.json", config)
    write_qwen_vl_processor_configs(out_dir, "Qwen2VLProcessor")
    return out_dir
