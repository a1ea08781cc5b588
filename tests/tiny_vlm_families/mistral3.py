"""The tiny Mistral 3 builder (mlx-vlm model type ``mistral3``: Mistral Small 3.1's layout)."""

from __future__ import annotations

from pathlib import Path

from .common import save_model, train_tokenizer, write_json

PIXTRAL_TOKENS = ("[INST]", "[/INST]", "[IMG]", "[IMG_BREAK]", "[IMG_END]")
"""Mistral's instruction tokens and Pixtral's image tokens."""

MISTRAL3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'user' %}[INST]{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}[IMG]{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}"
    "{% if message['role'] == 'user' %}[/INST]{% elif message['role'] == 'assistant' %}{{ eos_token }}{% endif %}"
    "{% endfor %}"
)
"""Mistral's ``[INST]...[/INST]`` format; an image part is written ``[IMG]``
(the processor expands it). As in Mistral's templates the assistant's turn
starts right after ``[/INST]``, so ``add_generation_prompt`` adds nothing."""


def build_tiny_mistral3(out_dir: Path, seed: int = 0) -> Path:
    """Write an mlx-vlm ``mistral3`` model directory (Mistral Small 3.1's
    layout: a Pixtral vision tower, a patch merger and a Mistral language
    model) with random weights to ``out_dir`` and return it (an existing
    build is reused): a 2-layer, 64-wide language model, a 1-layer 32-wide
    Pixtral tower on images resized to fit 32x32 (8-pixel patches merged
    2x2, so a square image is 2x2 image tokens plus one break and one end
    token), and a small (~350-token) byte-level BPE tokenizer trained here with
    Pixtral's image tokens.

    Raises ImportError without mlx-vlm.
    """
    import mlx.core as mx
    from mlx_vlm.models import mistral3

    if (out_dir / "model.safetensors").exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    specials = ["<unk>", "<s>", "</s>", "<pad>", *PIXTRAL_TOKENS]
    tokenizer = train_tokenizer(specials, {}, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
    tokenizer.chat_template = MISTRAL3_TEMPLATE
    tokenizer.save_pretrained(str(out_dir))
    vocab_size = len(tokenizer)
    text = {
        "model_type": "mistral",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab_size,
        "rope_theta": 10000.0,
        "max_position_embeddings": 2048,
    }
    vision = {
        "model_type": "pixtral",
        "num_hidden_layers": 1,
        "hidden_size": 32,
        "head_dim": 16,
        "intermediate_size": 64,
        "num_attention_heads": 2,
        "image_size": 32,
        "patch_size": 8,
        "rope_theta": 10000.0,
    }
    config = {
        "model_type": "mistral3",
        "architectures": ["Mistral3ForConditionalGeneration"],
        "text_config": text,
        "vision_config": vision,
        "vocab_size": vocab_size,
        "spatial_merge_size": 2,
        "vision_feature_layer": -1,
        "multimodal_projector_bias": False,
        "image_token_index": tokenizer.convert_tokens_to_ids("[IMG]"),
        "eos_token_id": [tokenizer.eos_token_id],
    }
    mx.random.seed(seed)
    model_config = mistral3.ModelConfig.from_dict(config)
    model_config.text_config = mistral3.TextConfig.from_dict(text)
    model_config.vision_config = mistral3.VisionConfig.from_dict(vision)
    model = mistral3.Model(model_config)
    save_model(model, out_dir)
    write_json(out_dir / "config.json", config)
    image_processor = {
        "image_processor_type": "PixtralImageProcessor",
        "processor_class": "PixtralProcessor",
        "size": {"longest_edge": 32},
        "patch_size": {"height": 8, "width": 8},
        "do_resize": True,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "do_convert_rgb": True,
        "resample": 3,
    }
    write_json(out_dir / "preprocessor_config.json", image_processor)
    write_json(
        out_dir / "processor_config.json",
        {"processor_class": "PixtralProcessor", "patch_size": 8, "spatial_merge_size": 2, "image_token": "[IMG]"},
    )
    return out_dir
