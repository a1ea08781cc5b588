"""The tiny Llama 3.2 Vision builder (mlx-vlm model type ``mllama``)."""

from __future__ import annotations

from pathlib import Path

from .common import save_model, train_tokenizer, write_json

MLLAMA_TOKENS = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|finetune_right_pad_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
)
"""Llama 3.2 Vision's text special tokens (the processor reads
``<|python_tag|>``); its image token ``<|image|>`` is added after them, as
the last token of the vocabulary, like the real checkpoint's 128256."""

MLLAMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<|image|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
"""Llama 3.2 Vision's header format; an image part is written ``<|image|>``
(one token: the processor does not expand it)."""


def build_tiny_mllama(out_dir: Path, seed: int = 0) -> Path:
    """Write an mlx-vlm ``mllama`` model directory with random weights to
    ``out_dir`` and return it (an existing build is reused): a 4-layer,
    64-wide language model whose layers 1 and 3 cross-attend to the image
    (their ``tanh`` gates random in [0.5, 1.5], not zero as mlx-vlm
    initializes them, so the image changes the answer), a 1-layer (plus 1
    global layer) 32-wide vision tower on 28x28 tiles (14-pixel patches: 5
    vision tokens per tile with the class token, up to 4 tiles), and a small
    (~350-token) byte-level BPE tokenizer trained here with Llama 3.2
    Vision's special tokens.

    Raises ImportError without mlx-vlm.
    """
    import mlx.core as mx
    from mlx_vlm.models import mllama
    from tokenizers import AddedToken

    if (out_dir / "model.safetensors").exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(
        list(MLLAMA_TOKENS),
        {},
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        pad_token="<|finetune_right_pad_id|>",
    )
    text_vocab_size = len(tokenizer)
    tokenizer.add_tokens([AddedToken("<|image|>", special=True, normalized=False)], special_tokens=True)
    tokenizer.chat_template = MLLAMA_TEMPLATE
    tokenizer.save_pretrained(str(out_dir))
    image_token = tokenizer.convert_tokens_to_ids("<|image|>")
    assert image_token == text_vocab_size
    tiles = 4
    text = {
        "model_type": "mllama_text_model",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "cross_attention_layers": [1, 3],
        "rms_norm_eps": 1e-5,
        "vocab_size": text_vocab_size,
        "rope_theta": 500000.0,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
    }
    vision = {
        "model_type": "mllama_vision_model",
        "image_size": 28,
        "patch_size": 14,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_global_layers": 1,
        "num_attention_heads": 2,
        "intermediate_layers_indices": [0],
        "vision_output_dim": 64,
        "max_num_tiles": tiles,
        "supported_aspect_ratios": [[1, 1], [1, 2], [1, 3], [1, 4], [2, 1], [2, 2], [3, 1], [4, 1]],
    }
    eos = [tokenizer.convert_tokens_to_ids(t) for t in ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>")]
    config = {
        "model_type": "mllama",
        "architectures": ["MllamaForConditionalGeneration"],
        "text_config": text,
        "vision_config": vision,
        "image_token_index": image_token,
        "eos_token_id": eos,
        "pad_token_id": tokenizer.pad_token_id,
    }
    mx.random.seed(seed)
    model_config = mllama.ModelConfig.from_dict(config)
    model_config.text_config = mllama.TextConfig.from_dict(text)
    model_config.vision_config = mllama.VisionConfig.from_dict(vision)
    model = mllama.Model(model_config)
    # mlx-vlm starts every tanh gate at zero: the cross-attention layers would
    # then ignore the image (and the vision tower its tile layout)
    for layer in model.language_model.model.layers:
        if hasattr(layer, "cross_attn_attn_gate"):
            layer.cross_attn_attn_gate = mx.random.uniform(0.5, 1.5, (1,))
            layer.cross_attn_mlp_gate = mx.random.uniform(0.5, 1.5, (1,))
            # and its query and key norms start at one: made random, a state
            # stored without the key norm gives other tokens
            for norm in (layer.cross_attn.q_norm, layer.cross_attn.k_norm):
                norm.weight = mx.random.uniform(0.2, 3.0, norm.weight.shape)
    tower = model.vision_tower
    for module in (tower.pre_tile_positional_embedding, tower.post_tile_positional_embedding):
        module.gate = mx.random.uniform(0.5, 1.5, (1,))
    tower.gated_positional_embedding.gate = mx.random.uniform(0.2, 0.5, (1,))
    for layer in tower.global_transformer.layers:
        layer.gate_attn = mx.random.uniform(0.5, 1.5, (1,))
        layer.gate_ffn = mx.random.uniform(0.5, 1.5, (1,))
    save_model(model, out_dir)
    write_json(out_dir / "config.json", config)
    image_processor = {
        "image_processor_type": "MllamaImageProcessor",
        "processor_class": "MllamaProcessor",
        "size": {"height": 28, "width": 28},
        "max_image_tiles": tiles,
        "do_resize": True,
        "do_pad": True,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "do_convert_rgb": True,
        "resample": 2,
    }
    write_json(out_dir / "preprocessor_config.json", image_processor)
    write_json(out_dir / "processor_config.json", {"processor_class": "MllamaProcessor"})
    return out_dir
