"""The tiny Qwen 3.5 MoE builder (mlx-vlm model type ``qwen3_5_moe``)."""

from __future__ import annotations

from pathlib import Path

from .common import save_model, train_tokenizer, write_json
from .qwen3_5 import QWEN3_5_SCALES, QWEN_VL_TEMPLATE, QWEN_VL_TOKENS, qwen3_vl_tower, write_qwen3_vl_processor


def build_tiny_qwen3_5_moe(out_dir: Path, seed: int = 1) -> Path:
    """Write an mlx-vlm ``qwen3_5_moe`` model directory with random weights
    to ``out_dir`` and return it (an existing build is reused): as
    :func:`~tests.tiny_vlm_families.qwen3_5.build_tiny_qwen3_5` (2-layer,
    64-wide language model: a gated-delta-net layer, then a gated
    full-attention layer with interleaved M-RoPE; 1-block 32-wide Qwen3-VL
    vision tower; images resized to at most 64x64, so at most 4 image
    tokens; the same tokenizer and template), but each layer's MLP is a
    sparse mixture of experts: 4 experts of intermediate size 32, 2 per
    token, plus a sigmoid-gated shared expert of intermediate size 32. The
    experts are saved stacked, in mlx-vlm's own layout
    (``mlp.switch_mlp.{gate,up,down}_proj.weight``, shape (4, out, in)),
    which ``sanitize`` leaves as is. The layers' output projections
    (the experts' and the shared expert's ``down_proj`` included) are scaled
    x8 and the vision merger's output x16 (see :mod:`tests.tiny_vlm_families`).
    Seed 1 by default: seed 0's model ends its answer to the tests' text
    prompt at once, and the tests compare eight decoded tokens.

    Raises ImportError without mlx-vlm.
    """
    import mlx.core as mx
    from mlx_vlm.models import qwen3_5_moe

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
        "model_type": "qwen3_5_moe_text",
        "hidden_size": 64,
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
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32,
        "norm_topk_prob": True,
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
    vision = qwen3_vl_tower("qwen3_5_moe")
    config = {
        "model_type": "qwen3_5_moe",
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
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
    model = qwen3_5_moe.Model(qwen3_5_moe.ModelConfig.from_dict(config))
    # as for Qwen 3.5 (the suffixes catch the experts' and the shared expert's down projections too)
    save_model(model, out_dir, QWEN3_5_SCALES)
    write_json(out_dir / "config.json", config)
    write_qwen3_vl_processor(out_dir)
    return out_dir
