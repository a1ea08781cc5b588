"""The tiny Gemma 3n builder (mlx-vlm model type ``gemma3n``).

Unlike the other families, the vision tower cannot be made small: mlx-vlm
0.7.10 builds Gemma 3n's MobileNetV5 tower from a hard-coded block list
(``gemma3n_mobilenet_def()``, the real ``mobilenetv5_300m_enc``: 294,126,912
parameters, whatever ``vision_config`` says), its fusion adapter always
outputs 2048 channels on a 16x16 grid (256 image tokens), and a checkpoint
without the tower's weights does not load (``VisionModel.sanitize`` reads
``vision_tower.timm_model.blocks.0.0.conv_exp.weight``: KeyError). So the
model is ~590 MB on disk (float16; the rest is under 1 MB), builds in 3 to
13 s and loads in under a second, but each image costs ~9 s on two CPU cores.

mlx-vlm's KV-shared layers rotate their queries by the shared cache's offset
after the current tokens were added (``L`` positions too far), so a prompt
prefilled in one call and in chunks (as ``mlx_vlm.generate`` does: all but
the last token, then the last) give different logits.
"""

from __future__ import annotations

from pathlib import Path

from .common import save_model, train_tokenizer, write_json

GEMMA3N_ROLES = {
    "image_token": "<image_soft_token>",
    "boi_token": "<start_of_image>",
    "eoi_token": "<end_of_image>",
    "audio_token": "<audio_soft_token>",
    "boa_token": "<start_of_audio>",
    "eoa_token": "<end_of_audio>",
}
"""The special tokens Gemma 3n's processor reads from its tokenizer, by role."""

VISION_TOKENS = ["<end_of_image>", "<image_soft_token>"]
"""The tokens of the vision part of the vocabulary (``embed_vision``'s hard
tokens), in id order, as in the real checkpoints (262144, 262145)."""

AUDIO_TOKENS = ["<end_of_audio>", "<audio_soft_token>"]
"""The tokens of the audio part of the vocabulary (``embed_audio``'s hard
tokens: the last ids), in id order, as in the real checkpoints (262272, 262273)."""

GEMMA3N_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "<start_of_turn>{{ role }}\n"
    "{% if message['content'] is string %}{{ message['content'] | trim }}{% else %}"
    "{% for part in message['content'] %}"
    "{% if part['type'] == 'audio' %}<audio_soft_token>{% elif part['type'] == 'image' %}<image_soft_token>"
    "{% elif part['type'] == 'text' %}{{ part['text'] | trim }}{% endif %}{% endfor %}{% endif %}"
    "<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
"""Gemma 3n's turn format (its real template without the system-prompt
folding): an image part is written ``<image_soft_token>``, an audio part
``<audio_soft_token>`` (the processor expands both)."""

IMAGE_SIZE = 256
"""The image side the processor resizes to. mlx-vlm's tower needs a multiple
of 256: below, its fusion adapter's bicubic branch fails (broadcast error);
at 256 it skips the adapter's resize and norm (channels-first output, read
as is); 512 and up take the real average-pool path. One tower call on two
CPU cores: 256, 6 to 9 s; 512, 15 to 19 s; the real 768, ~70 s."""

AUDIO_TOKENS_PER_CLIP = 188
"""Audio soft tokens per clip (the real value: a 30 s clip's 750 encoder
frames reduced 4x; shorter clips are padded with the audio padding embedding)."""


def _tokenizer():
    """The tokenizer: :func:`train_tokenizer`'s with the vision and audio
    tokens appended, so they take the last ids (the multimodal part of the
    vocabulary) as in the real Gemma 3n vocabulary."""
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
    specials += ["<start_of_image>", "<start_of_audio>"]
    text_only = train_tokenizer(specials, {})
    backend = text_only.backend_tokenizer
    backend.add_special_tokens(VISION_TOKENS + AUDIO_TOKENS)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        extra_special_tokens=GEMMA3N_ROLES,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
    )


def build_tiny_gemma3n(out_dir: Path, seed: int = 0) -> Path:
    """Write an mlx-vlm ``gemma3n`` model directory with random weights to
    ``out_dir`` and return it (an existing build is reused): a 4-layer,
    64-wide language model (sliding-window and full-attention layers
    alternating; the last two reuse the keys and values of the first two,
    as Gemma 3n's KV-shared layers do; AltUp with 2 inputs, LAuReL rank 8,
    16-wide per-layer inputs; attention outputs scaled x4 after their norm),
    the full MobileNetV5 vision tower (fixed size, see the module docstring)
    on 256x256 images, a 1-layer 32-wide audio conformer on 128-bin log-mel
    features (188 audio tokens per clip, as in the real model), and a small
    (~350-token) byte-level BPE tokenizer trained here with Gemma 3n's
    special tokens. The vision tower's weights are float16, the rest float32.

    Raises ImportError without mlx-vlm.
    """
    import mlx.core as mx
    from mlx.utils import tree_map
    from mlx_vlm.models import gemma3n

    if (out_dir / "model.safetensors").exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer()
    tokenizer.chat_template = GEMMA3N_TEMPLATE
    tokenizer.save_pretrained(str(out_dir))
    vocab_size = len(tokenizer)
    ids = {role: tokenizer.convert_tokens_to_ids(token) for role, token in GEMMA3N_ROLES.items()}
    vision_offset = tokenizer.convert_tokens_to_ids(VISION_TOKENS[0])
    audio_offset = tokenizer.convert_tokens_to_ids(AUDIO_TOKENS[0])
    assert audio_offset + len(AUDIO_TOKENS) == vocab_size == vision_offset + len(VISION_TOKENS) + len(AUDIO_TOKENS)
    layers = 4
    text = {
        "model_type": "gemma3n_text",
        "hidden_size": 64,
        "num_hidden_layers": layers,
        "intermediate_size": [128] * layers,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "vocab_size": vocab_size,
        "vocab_size_per_layer_input": vision_offset,
        "hidden_size_per_layer_input": 16,
        "laurel_rank": 8,
        "altup_num_inputs": 2,
        "altup_active_idx": 0,
        "altup_coef_clip": 120.0,
        "altup_correct_scale": True,
        "num_kv_shared_layers": 2,
        "layer_types": ["sliding_attention", "full_attention"] * (layers // 2),
        "sliding_window": 512,
        "activation_sparsity_pattern": [0.95] + [0.0] * (layers - 1),
        "final_logit_softcapping": 30.0,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "max_position_embeddings": 32768,
        "pad_token_id": tokenizer.pad_token_id,
    }
    vision = {
        "model_type": "gemma3n_vision",
        "architecture": "mobilenetv5_300m_enc",
        "hidden_size": 2048,
        "vocab_size": len(VISION_TOKENS),
        "vocab_offset": vision_offset,
        "rms_norm_eps": 1e-6,
    }
    audio = {
        "model_type": "gemma3n_audio",
        "input_feat_size": 128,
        "hidden_size": 32,
        "conf_num_attention_heads": 2,
        "conf_num_hidden_layers": 1,
        "conf_attention_chunk_size": 12,
        "conf_attention_context_left": 13,
        "conf_attention_context_right": 0,
        "conf_conv_kernel_size": 5,
        "conf_reduction_factor": 4,
        "sscp_conv_channel_size": [8, 4],
        "vocab_size": len(AUDIO_TOKENS),
        "vocab_offset": audio_offset,
    }
    config = {
        "model_type": "gemma3n",
        "architectures": ["Gemma3nForConditionalGeneration"],
        "text_config": text,
        "vision_config": vision,
        "audio_config": audio,
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "image_token_id": ids["image_token"],
        "image_token_index": ids["image_token"],
        "boi_token_id": ids["boi_token"],
        "eoi_token_id": ids["eoi_token"],
        "audio_token_id": ids["audio_token"],
        "boa_token_id": ids["boa_token"],
        "eoa_token_id": ids["eoa_token"],
        "vision_soft_tokens_per_image": 256,
        "audio_soft_tokens_per_image": AUDIO_TOKENS_PER_CLIP,
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<end_of_turn>")],
        "torch_dtype": "float16",
    }
    mx.random.seed(seed)
    model_config = gemma3n.ModelConfig.from_dict(config)
    # from_dict leaves the nested configs as dicts (mlx_vlm.load converts them the same way)
    model_config.text_config = gemma3n.TextConfig.from_dict(text)
    model_config.vision_config = gemma3n.VisionConfig.from_dict(vision)
    model_config.audio_config = gemma3n.AudioConfig.from_dict(audio)
    model = gemma3n.Model(model_config)
    # mlx-vlm starts AltUp's correct_output_scale at zero, which cuts the
    # per-layer-input branch off: make it random
    for layer in model.language_model.model.layers:
        layer.altup.correct_output_scale = mx.random.uniform(0.5, 1.5, layer.altup.correct_output_scale.shape)
    # the vision tower in float16 (its size; audio requests never run it), the
    # rest in float32, so a worker's float32 copy computes what mlx-vlm's does
    model.vision_tower.update(tree_map(lambda v: v.astype(mx.float16), model.vision_tower.parameters()))
    # a 1 s clip is 7 audio tokens among 188 (the rest padding): at random init
    # their effect on the answer is too small to change it, unless the
    # attention outputs outweigh the residual stream
    save_model(model, out_dir, scales={"post_attention_layernorm.weight": 4.0})
    write_json(out_dir / "config.json", config)
    # Gemma 3n's joint preprocessor_config.json: the audio feature extractor's
    # fields and the (SigLIP) image processor's in one file
    preprocessor = {
        "processor_class": "Gemma3nProcessor",
        "feature_extractor_type": "Gemma3nAudioFeatureExtractor",
        "feature_size": 128,
        "sampling_rate": 16000,
        "padding_value": 0.0,
        "padding_side": "right",
        "return_attention_mask": True,
        "frame_length": 512,
        "hop_length": 160,
        "fft_length": 1024,
        "min_frequency": 125.0,
        "max_frequency": 7600.0,
        "preemphasis": 0.97,
        "preemphasis_htk_flavor": True,
        "fft_overdrive": True,
        "dither": 0.0,
        "input_scale_factor": 1.0,
        "mel_floor": 1e-5,
        "per_bin_mean": None,
        "per_bin_stddev": None,
        "image_processor_type": "SiglipImageProcessorFast",
        "size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        "do_resize": True,
        "resample": 2,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": False,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_convert_rgb": None,
        "image_seq_length": 256,
    }
    write_json(out_dir / "preprocessor_config.json", preprocessor)
    write_json(
        out_dir / "processor_config.json",
        {"processor_class": "Gemma3nProcessor", "image_seq_length": 256, "audio_seq_length": AUDIO_TOKENS_PER_CLIP},
    )
    return out_dir
