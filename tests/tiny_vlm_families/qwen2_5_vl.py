"""The tiny Qwen2.5-VL builder (mlx-vlm model type ``qwen2_5_vl``)."""

from __future__ import annotations

from pathlib import Path

from .common import save_model, write_json
from .qwen2_vl import qwen_vl_config, qwen_vl_tokenizer, write_qwen_vl_processor_configs


def build_tiny_qwen2_5_vl(out_dir: Path, seed: int = 0) -> Path:
    """Write an mlx-vlm ``qwen2_5_vl`` model directory with random weights
    to ``out_dir`` and return it (an existing build is reused): a 2-layer,
    64-wide Qwen2 language model with chunked M-RoPE, a 2-block 32-wide
    Qwen2.5-VL vision tower (RMSNorm, gated MLP; the first block attends
    within 64-pixel windows, the second over the whole image; 16-pixel
    patches over pairs of frames, merged 2x2; images resized to at most
    64x64, so at most 4 image tokens), and a small (~350-token) byte-level
    BPE tokenizer trained here with Qwen-VL's vision tokens and chat
    template. No weights are scaled: with the untied output
    head the image (or video) already changes the answer.

    Raises ImportError without mlx-vlm.
    """
    import mlx.core as mx
    from mlx_vlm.models import qwen2_5_vl

    if (out_dir / "model.safetensors").exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    ids, vocab_size = qwen_vl_tokenizer(out_dir)
    vision = {
        "model_type": "qwen2_5_vl",
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "out_hidden_size": 64,
        "num_heads": 2,
        "patch_size": 16,
        "spatial_patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "tokens_per_second": 2,
        "window_size": 64,
        "fullatt_block_indexes": [1],
        "in_channels": 3,
    }
    config = qwen_vl_config("qwen2_5_vl", ids, vocab_size, vision)
    config["architectures"] = ["Qwen2_5_VLForConditionalGeneration"]
    mx.random.seed(seed)
    model_config = qwen2_5_vl.ModelConfig.from_dict(dict(config))
    model_config.text_config = qwen2_5_vl.TextConfig.from_dict(model_config.text_config)
    model_config.vision_config = qwen2_5_vl.VisionConfig.from_dict(vision)
    model = qwen2_5_vl.Model(model_config)
    save_model(model, out_dir)
    write_json(out_dir / "config.json", config)
    write_qwen_vl_processor_configs(out_dir, "Qwen2_5_VLProcessor")
    return out_dir
