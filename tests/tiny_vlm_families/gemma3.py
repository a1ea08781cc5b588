"""The tiny Gemma 3 builder (mlx-vlm model type ``gemma3``)."""

from __future__ import annotations

from pathlib import Path

from .common import save_model, train_tokenizer, write_json

GEMMA3_ROLES = {"image_token": "<image_soft_token>", "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>"}
"""The special tokens Gemma 3's processor reads from its tokenizer, by role."""

GEMMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "<start_of_turn>{{ role }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<start_of_image>{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
"""Gemma 3's turn format; an image part is written ``<start_of_image>``
(the processor expands it)."""


def build_tiny_gemma3(out_dir: Path, seed: int = 0) -> Path:
    """Write an mlx-vlm ``gemma3`` model directory with random weights to
    ``out_dir`` and return it (an existing build is reused): a 2-layer,
    64-wide language model (one sliding-window layer of 64 tokens, one
    global layer), a 1-layer 32-wide SigLIP tower on 32x32 images (8-pixel
    patches, average-pooled to 4 image tokens), a small (~350-token) byte-level BPE
    tokenizer trained here with Gemma 3's special tokens.

    Raises ImportError without mlx-vlm.
    """
    import mlx.core as mx
    from mlx_vlm.models import gemma3

    if (out_dir / "model.safetensors").exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", *GEMMA3_ROLES.values()]
    tokenizer = train_tokenizer(
        specials, GEMMA3_ROLES, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
    tokenizer.chat_template = GEMMA3_TEMPLATE
    tokenizer.save_pretrained(str(out_dir))
    vocab_size = len(tokenizer)
    image_tokens = 4
    text = {
        "model_type": "gemma3_text",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "query_pre_attn_scalar": 32,
        "vocab_size": vocab_size,
        "sliding_window": 64,
        "sliding_window_pattern": 2,
        "mm_tokens_per_image": image_tokens,
        "max_position_embeddings": 2048,
    }
    vision = {
        "model_type": "siglip_vision_model",
        "num_hidden_layers": 1,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_attention_heads": 2,
        "patch_size": 8,
        "image_size": 32,
    }
    config = {
        "model_type": "gemma3",
        "architectures": ["Gemma3ForConditionalGeneration"],
        "text_config": text,
        "vision_config": vision,
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "mm_tokens_per_image": image_tokens,
        "image_token_index": tokenizer.convert_tokens_to_ids("<image_soft_token>"),
        "boi_token_index": tokenizer.convert_tokens_to_ids("<start_of_image>"),
        "eoi_token_index": tokenizer.convert_tokens_to_ids("<end_of_image>"),
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<end_of_turn>")],
    }
    mx.random.seed(seed)
    model_config = gemma3.ModelConfig.from_dict(config)
    model_config.text_config = gemma3.TextConfig.from_dict(text)
    model_config.vision_config = gemma3.VisionConfig.from_dict(vision)
    model = gemma3.Model(model_config)
    projector = model.multi_modal_projector
    # the projection starts as all ones (every image token the same vector): randomize it
    projector.mm_input_projection_weight = mx.random.normal(projector.mm_input_projection_weight.shape)
    save_model(model, out_dir)
    write_json(out_dir / "config.json", config)
    image_processor = {
        "image_processor_type": "Gemma3ImageProcessor",
        "processor_class": "Gemma3Processor",
        "size": {"height": 32, "width": 32},
        "do_resize": True,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_convert_rgb": True,
        "do_pan_and_scan": False,
        "resample": 2,
    }
    write_json(out_dir / "preprocessor_config.json", image_processor)
    write_json(
        out_dir / "processor_config.json", {"processor_class": "Gemma3Processor", "image_seq_length": image_tokens}
    )
    return out_dir
