"""The tiny SmolVLM builder (mlx-vlm model type ``smolvlm``: SmolVLM2's
layout, Idefics3's model with a SmolLM2 tokenizer and its own processor)."""

from __future__ import annotations

from pathlib import Path

from .common import save_model, train_tokenizer, write_json

SMOLVLM_ROLES = {
    "fake_image_token": "<fake_token_around_image>",
    "image_token": "<image>",
    "end_of_utterance_token": "<end_of_utterance>",
    "global_image_token": "<global-img>",
}
"""The image and turn tokens SmolVLM's processor reads from its tokenizer,
by role (``<global-img>`` tags the whole-image block)."""

SMOLVLM_TILE_TOKENS = tuple(f"<row_{row}_col_{col}>" for row in range(1, 7) for col in range(1, 7))
"""SmolVLM's tile markers for grids of up to 6x6 tiles (unused here: image
splitting is off)."""

SMOLVLM_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'] is string %}: {{ message['content'] }}{% else %}"
    "{% if message['content'][0]['type'] == 'image' %}:{% else %}: {% endif %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)
"""SmolVLM's ``<|im_start|>User: ...<end_of_utterance>`` format; an image
part is written ``<image>`` (the processor expands it)."""


def build_tiny_smolvlm(out_dir: Path, seed: int = 0) -> Path:
    """Write an mlx-vlm ``smolvlm`` model directory with random weights to
    ``out_dir`` and return it (an existing build is reused): a 2-layer,
    64-wide Llama-style language model, a 1-layer 32-wide SigLIP tower
    (``smolvlm_vision``) on 32x32 images (8-pixel patches, pixel-shuffled
    2x2 to 4 image tokens), image splitting off, and a small (~350-token)
    byte-level BPE tokenizer trained here with SmolVLM's special tokens and
    chat template (which mlx-vlm's ``SmolVLMProcessor`` also takes as its
    own).

    Raises ImportError without mlx-vlm.
    """
    import mlx.core as mx
    from mlx_vlm.models import smolvlm

    if (out_dir / "model.safetensors").exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    specials = [
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        *SMOLVLM_ROLES.values(),
        *SMOLVLM_TILE_TOKENS,
    ]
    tokenizer = train_tokenizer(
        specials,
        SMOLVLM_ROLES,
        bos_token="<|im_start|>",
        eos_token="<end_of_utterance>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
    )
    tokenizer.chat_template = SMOLVLM_TEMPLATE
    tokenizer.save_pretrained(str(out_dir))
    vocab_size = len(tokenizer)
    text = {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab_size,
        "rope_theta": 100000.0,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
    }
    vision = {
        "model_type": "smolvlm_vision",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "patch_size": 8,
        "image_size": 32,
    }
    config = {
        "model_type": "smolvlm",
        "architectures": ["SmolVLMForConditionalGeneration"],
        "text_config": text,
        "vision_config": vision,
        "vocab_size": vocab_size,
        "scale_factor": 2,
        "image_token_id": tokenizer.convert_tokens_to_ids("<image>"),
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": [tokenizer.convert_tokens_to_ids("<end_of_utterance>")],
    }
    mx.random.seed(seed)
    model_config = smolvlm.ModelConfig.from_dict(config)
    model_config.text_config = smolvlm.TextConfig.from_dict(text)
    model_config.vision_config = smolvlm.VisionConfig.from_dict(vision)
    model = smolvlm.Model(model_config)
    save_model(model, out_dir)
    write_json(out_dir / "config.json", config)
    image_processor = {
        "image_processor_type": "SmolVLMImageProcessor",
        "processor_class": "SmolVLMProcessor",
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
    write_json(out_dir / "processor_config.json", {"processor_class": "SmolVLMProcessor", "image_seq_len": 4})
    return out_dir
