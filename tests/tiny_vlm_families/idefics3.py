"""The tiny Idefics3 builder (mlx-vlm model type ``idefics3``)."""

from __future__ import annotations

from pathlib import Path

from .common import save_model, train_tokenizer, write_json

IDEFICS3_TOKENS = ("<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>")
"""Idefics3's image and turn tokens (the processor adds the first three to
its tokenizer anyway; ``<global-img>`` tags the whole-image block)."""

IDEFICS3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'] is string %}: {{ message['content'] }}{% else %}"
    "{% if message['content'][0]['type'] == 'image' %}:{% else %}: {% endif %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)
"""Idefics3's ``User: ...<end_of_utterance>`` format; an image part is
written ``<image>`` (the processor expands it)."""


def build_tiny_idefics3(out_dir: Path, seed: int = 0) -> Path:
    """Write an mlx-vlm ``idefics3`` model directory with random weights to
    ``out_dir`` and return it (an existing build is reused): a 2-layer,
    64-wide Llama-style language model, a 1-layer 32-wide SigLIP tower on
    32x32 images (8-pixel patches, pixel-shuffled 2x2 to 4 image tokens),
    image splitting off, and a small (~350-token) byte-level BPE tokenizer trained
    here with Idefics3's image tokens.

    Raises ImportError without mlx-vlm.
    """
    import mlx.core as mx
    from mlx_vlm.models import idefics3

    if (out_dir / "model.safetensors").exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    specials = ["<|endoftext|>", "<|begin_of_text|>", "<unk>", *IDEFICS3_TOKENS]
    tokenizer = train_tokenizer(
        specials,
        {},
        bos_token="<|begin_of_text|>",
        eos_token="<end_of_utterance>",
        pad_token="<|endoftext|>",
        unk_token="<unk>",
    )
    tokenizer.chat_template = IDEFICS3_TEMPLATE
    tokenizer.save_pretrained(str(out_dir))
    vocab_size = len(tokenizer)
    text = {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab_size,
        "rope_theta": 10000.0,
        "max_position_embeddings": 2048,
    }
    vision = {
        "model_type": "idefics3_vision",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "patch_size": 8,
        "image_size": 32,
    }
    config = {
        "model_type": "idefics3",
        "architectures": ["Idefics3ForConditionalGeneration"],
        "text_config": text,
        "vision_config": vision,
        "vocab_size": vocab_size,
        "scale_factor": 2,
        "image_token_id": tokenizer.convert_tokens_to_ids("<image>"),
        "eos_token_id": [tokenizer.convert_tokens_to_ids("<end_of_utterance>")],
    }
    mx.random.seed(seed)
    model_config = idefics3.ModelConfig.from_dict(config)
    model_config.text_config = idefics3.TextConfig.from_dict(text)
    model_config.vision_config = idefics3.VisionConfig.from_dict(vision)
    model = idefics3.Model(model_config)
    save_model(model, out_dir)
    write_json(out_dir / "config.json", config)
    image_processor = {
        "image_processor_type": "Idefics3ImageProcessor",
        "processor_class": "Idefics3Processor",
        "do_resize": True,
        "size": {"longest_edge": 32},
        "max_image_size": {"longest_edge": 32},
        "do_image_splitting": False,
        "do_pad": True,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_convert_rgb": True,
        "resample": 1,
    }
    write_json(out_dir / "preprocessor_config.json", image_processor)
    write_json(out_dir / "processor_config.json", {"processor_class": "Idefics3Processor", "image_seq_len": 4})
    return out_dir
