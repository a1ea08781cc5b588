"""The tiny Qwen3-Omni builder (mlx-vlm model type ``qwen3_omni_moe``).

Qwen3-Omni is a "thinker" (a MoE language model with a Whisper-style audio
encoder and a Qwen3-VL vision tower) and, for speech output, a "talker" and
a ``code2wav`` vocoder. Every part is sized by the config. The model here has
``enable_audio_output`` false (no talker or vocoder weights; mlx-vlm then
builds neither, as for a text-output checkpoint), but ``config.json`` still
carries tiny ``talker_config`` and ``code2wav_config`` sections, because
mlx-vlm's config class needs a ``talker_config.text_config``. (With
``enable_audio_output`` true and the talker's and vocoder's random weights
added, 233,489 parameters, ``Model.generate(..., return_audio=True)``
returns a waveform; the code predictor's ``hidden_size`` must equal the
talker's.) The role ids (``system_token_id`` and so on) must be ints:
loading the feature extractor parses ``config.json`` with transformers'
strict ``Qwen3OmniMoeConfig``.

Not in :data:`~tests.tiny_vlm_families.BUILDERS` (served for audio).
mlx-vlm 0.7.10 facts:

* Processor: mlx-vlm's ``Qwen3OmniMoeProcessor`` with transformers'
  ``WhisperFeatureExtractor`` (128 mel bins, hop 160 at 16 kHz) and mlx-vlm's
  ``Qwen3VLImageProcessor`` / ``Qwen3VLVideoProcessor``; its chat template is
  the tokenizer's. It reads the audio and vision tokens from the tokenizer's
  named special tokens (``audio_token`` and so on: :data:`QWEN_OMNI_ROLES`).
* The template writes ``<|audio_start|><|audio_pad|><|audio_end|>`` for an
  audio part; the processor repeats the pad: 13 tokens per full second of
  audio (100 mel frames) plus the remainder's (a 1.5 s clip is 20, 0.5 s 7,
  10 s 130). ``mlx_vlm.generate`` pads the features to the clip
  (``input_features`` (1, 128, 150) and ``feature_attention_mask`` (1, 24000)
  for 1.5 s, the mask in samples); a direct ``processor(...)`` call pads them
  to 30 s (``(1, 128, 30000)``, mask ``(1, 4800000)``), unless given
  ``padding="longest"``. Its outputs are ``mx.array`` whatever
  ``return_tensors`` says.
* ``get_input_embeddings(input_ids, input_features=...,
  feature_attention_mask=...)`` (or ``input_features_mask``;
  ``audio_feature_lengths`` in mel frames is optional) returns
  ``inputs_embeds``, ``position_ids`` (1, L) and ``rope_deltas`` (1, 1). The
  language model has ``get_rope_index``, but it gives audio tokens plain
  consecutive positions (no TMRoPE: only image and video grids get M-RoPE
  positions). ``make_cache()``: one ``KVCache`` per layer.
"""

from __future__ import annotations

from pathlib import Path

from .common import save_model, train_tokenizer, write_json
from .qwen3_5 import qwen3_vl_tower

QWEN_OMNI_TOKENS = (
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_pad|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
)
"""ChatML's turn tokens, Qwen-VL's vision tokens, Qwen-Omni's audio tokens and
the talker's text-to-speech tokens."""

QWEN_OMNI_ROLES = {
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
    "audio_token": "<|audio_pad|>",
    "vision_bos_token": "<|vision_start|>",
    "vision_eos_token": "<|vision_end|>",
    "audio_bos_token": "<|audio_start|>",
    "audio_eos_token": "<|audio_end|>",
}
"""The special tokens Qwen3-Omni's processor reads from its tokenizer, by role
(as in the real ``tokenizer_config.json``)."""

QWEN_OMNI_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'audio' %}"
    "<|audio_start|><|audio_pad|><|audio_end|>{% elif part['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif part['type'] == 'video' %}"
    "<|vision_start|><|video_pad|><|vision_end|>{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""Qwen3-Omni's ChatML format; an audio part is written
``<|audio_start|><|audio_pad|><|audio_end|>``, an image part
``<|vision_start|><|image_pad|><|vision_end|>``, a video part likewise with
``<|video_pad|>`` (the processor repeats the pads)."""


def build_tiny_qwen3_omni_moe(out_dir: Path, seed: int = 0) -> Path:
    """Write an mlx-vlm ``qwen3_omni_moe`` model directory with random weights
    to ``out_dir`` and return it (an existing build is reused): the thinker
    only (``enable_audio_output`` false), a 2-layer, 64-wide MoE language
    model (4 experts of intermediate size 32, 2 per token, interleaved
    M-RoPE; untied ``lm_head``, as in the real model), a 1-layer 32-wide
    audio encoder on 128-bin log-mel features (8-channel convolution
    front end), a 1-block 32-wide Qwen3-VL vision tower without deepstack
    (images resized to at most 64x64, so at most 4 image tokens), and a small
    (~350-token) byte-level BPE tokenizer trained here with Qwen3-Omni's
    special tokens. The audio encoder's ``conv_out`` and ``proj2`` are scaled
    x16, so that different clips give different answers (at random init its
    sinusoidal position embedding outweighs the convolutions' output).

    Raises ImportError without mlx-vlm.
    """
    import mlx.core as mx
    from mlx_vlm.models import qwen3_omni_moe

    if (out_dir / "model.safetensors").exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    specials = ["<|endoftext|>", *QWEN_OMNI_TOKENS]
    tokenizer = train_tokenizer(specials, QWEN_OMNI_ROLES, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = QWEN_OMNI_TEMPLATE
    tokenizer.save_pretrained(str(out_dir))
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in QWEN_OMNI_TOKENS}
    vocab_size = len(tokenizer)
    eos = ids["<|im_end|>"]
    # the token after <|im_start|> in each role's turn (the real vocabulary
    # has one token per role; this one splits "system")
    role_ids = {role: tokenizer.encode(role)[0] for role in ("system", "user", "assistant")}
    text = {
        "model_type": "qwen3_omni_moe_text",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "moe_intermediate_size": 32,
        "norm_topk_prob": True,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab_size,
        "rope_theta": 10000.0,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
        "rope_scaling": {"type": "default", "mrope_section": [6, 5, 5], "interleaved": True, "mrope_interleaved": True},
    }
    audio = {
        "model_type": "qwen3_omni_moe_audio_encoder",
        "d_model": 32,
        "encoder_layers": 1,
        "num_hidden_layers": 1,
        "encoder_attention_heads": 2,
        "encoder_ffn_dim": 64,
        "num_mel_bins": 128,
        "output_dim": 64,
        "downsample_hidden_size": 8,
        "n_window": 50,
        "n_window_infer": 800,
        "conv_chunksize": 500,
        "max_source_positions": 1500,
    }
    vision = qwen3_vl_tower("qwen3_omni_moe_vision_encoder")
    media_ids = {
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "audio_token_id": ids["<|audio_pad|>"],
        "audio_start_token_id": ids["<|audio_start|>"],
        "audio_end_token_id": ids["<|audio_end|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
    }
    thinker = {
        "model_type": "qwen3_omni_moe_thinker",
        "text_config": text,
        "audio_config": audio,
        "vision_config": vision,
        **media_ids,
        "vision_end_token_id": ids["<|vision_end|>"],
        "user_token_id": role_ids["user"],
        "position_id_per_seconds": 13,
        "seconds_per_chunk": 2,
    }
    # not built (enable_audio_output is false), but the config class needs
    # talker_config.text_config; tiny, so a build with the talker stays small
    talker = {
        "model_type": "qwen3_omni_moe_talker",
        "text_config": {**text, "vocab_size": 64, "shared_expert_intermediate_size": 32},
        "code_predictor_config": {
            "model_type": "qwen3_omni_moe_talker_code_predictor",
            "num_hidden_layers": 1,
            "hidden_size": 64,
            "intermediate_size": 64,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "vocab_size": 32,
            "num_code_groups": 4,
            "layer_types": ["full_attention"],
        },
        "accept_hidden_layer": 1,
        "thinker_hidden_size": 64,
        "num_code_groups": 4,
        **media_ids,
        "codec_pad_id": 50,
        "codec_bos_id": 51,
        "codec_eos_token_id": 52,
        "codec_nothink_id": 53,
        "codec_think_bos_id": 54,
        "codec_think_eos_id": 55,
        "speaker_id": {"ethan": 56},
    }
    code2wav = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "decoder_dim": 32,
        "codebook_dim": 16,
        "codebook_size": 32,
        "num_quantizers": 4,
        "semantic_codebook_size": 32,
        "vector_quantization_hidden_dimension": 16,
        "upsample_rates": [2, 2],
        "upsampling_ratios": [2],
        "sliding_window": 8,
    }
    config = {
        "model_type": "qwen3_omni_moe",
        "architectures": ["Qwen3OmniMoeForConditionalGeneration"],
        "thinker_config": thinker,
        "talker_config": talker,
        "code2wav_config": code2wav,
        "enable_audio_output": False,
        "eos_token_id": eos,
        "im_start_token_id": ids["<|im_start|>"],
        "im_end_token_id": eos,
        "system_token_id": role_ids["system"],
        "user_token_id": role_ids["user"],
        "assistant_token_id": role_ids["assistant"],
        "tts_pad_token_id": ids["<tts_pad>"],
        "tts_bos_token_id": ids["<tts_text_bos>"],
        "tts_eos_token_id": ids["<tts_text_eod>"],
    }
    mx.random.seed(seed)
    model = qwen3_omni_moe.Model(qwen3_omni_moe.ModelConfig.from_dict(config))
    save_model(model, out_dir, scales={"audio_tower.conv_out.weight": 16.0, "audio_tower.proj2.weight": 16.0})
    write_json(out_dir / "config.json", config)
    # Qwen3-Omni's joint preprocessor_config.json: the Whisper feature
    # extractor's fields (the real ones) and the Qwen-VL image processor's
    image_processor = {
        "patch_size": 16,
        "merge_size": 2,
        "temporal_patch_size": 2,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "min_pixels": 32 * 32,
        "max_pixels": 64 * 64,
    }
    preprocessor = {
        "processor_class": "Qwen3OmniMoeProcessor",
        "feature_extractor_type": "WhisperFeatureExtractor",
        "feature_size": 128,
        "sampling_rate": 16000,
        "hop_length": 160,
        "n_fft": 400,
        "chunk_length": 300,
        "n_samples": 4800000,
        "nb_max_frames": 30000,
        "padding_side": "right",
        "padding_value": 0.0,
        "return_attention_mask": True,
        "dither": 0.0,
        "image_processor_type": "Qwen2VLImageProcessor",
        **image_processor,
    }
    write_json(out_dir / "preprocessor_config.json", preprocessor)
    # present so mlx-vlm does not look for it on the Hub
    write_json(out_dir / "video_preprocessor_config.json", image_processor)
    write_json(out_dir / "processor_config.json", {"processor_class": "Qwen3OmniMoeProcessor"})
    return out_dir
