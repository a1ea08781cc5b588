"""A tiny random-weight Kokoro text-to-speech model for fast tests.

Built offline from mlx-audio's own ``kokoro`` classes and saved the way
Kokoro checkpoints are stored (the layout mlx-audio's loader sanitizes),
with two voice packs in Kokoro's format (``voices/<name>.safetensors``, one
``voice`` tensor of shape ``(510, 1, 256)``: a style row per phoneme count).

What "tiny" can mean here: Kokoro's iSTFTNet decoder hard-codes 512-, 1024-
and 64-channel convolutions and splits the style at 128, so ``hidden_dim``
512, ``upsample_initial_channel`` 512 and ``style_dim`` 128 stay. Its
generator's noise blocks hard-code dilated kernels (7 and 11 wide,
dilations 1, 3, 5), which MLX's CPU ``conv1d`` runs ~30x slower than
undilated ones: with Kokoro's own upsampling (10 x 6, then the inverse
STFT's hop 5: 300 samples a frame) they took nine tenths of a chunk's ~2.6
CPU seconds. Here the generator upsamples 1 x 2 and the inverse STFT does
the rest (hop 100, FFT 200: 200 samples a frame, for about a tenth of
the work; the noise blocks run on 1/10 and 1/30 of the samples,
the STFT sizes barely count), so a chunk of a few phonemes is ~0.25 CPU
seconds for ~0.2 s of audio: long enough that a dropped chunk shows in a
lossy file's length. The text side is one small layer, the resblocks one
undilated kernel, and ``max_dur`` 4 keeps each phoneme a few frames (yet
long enough that ``speed`` changes the length).
``ConvWeighted`` initialises ``weight_v`` to ones (a placeholder for loaded
weights), which overflows to inf/NaN audio: those are drawn at random
here. The last convolution's gains (``conv_post.weight_g``) are scaled by
:data:`POST_GAIN` so the audio stays within full scale (unscaled, nine
samples in ten clip at +-1, and clipped samples compare equal whatever
the model computed).

Needs the ``speech`` extra (mlx-audio). Deterministic for a given seed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

PHONEME_SYMBOLS = (
    ';:,.!?—…"()“” abcdefhijklmnopqrstuvwxyzɑɐɒæβɔçðʤəɚɛɜɟɡɥɨɪʝɯɰŋɲɳɴøɵɸθœɹɾɻʁʃʈʧʊʋʌɣɤχʎʒʔˈˌːʰʲ↓↑→↗↘ᵻAIOQSTWYᵊ'
)
"""The symbols of the tiny model's phoneme vocabulary (ids from 1 in this
order): IPA letters and stress marks espeak-ng writes for the languages the
tests use, punctuation and Kokoro's diphthong capitals."""

VOICES = ("af_tiny", "am_tiny")
"""The voice packs written beside the weights (American English voices:
their first letter ``a`` picks the G2P language)."""

CONFIG = {
    "model_type": "kokoro",
    "istftnet": {
        "upsample_kernel_sizes": [1, 4],
        "upsample_rates": [1, 2],
        "gen_istft_hop_size": 100,
        "gen_istft_n_fft": 200,
        "resblock_dilation_sizes": [[1, 1, 1]],
        "resblock_kernel_sizes": [3],
        "upsample_initial_channel": 512,
    },
    "dim_in": 64,
    "dropout": 0.2,
    "hidden_dim": 512,
    "max_conv_dim": 512,
    "max_dur": 4,
    "multispeaker": True,
    "n_layer": 1,
    "n_mels": 80,
    "style_dim": 128,
    "text_encoder_kernel_size": 5,
    "plbert": {
        "hidden_size": 64,
        "num_attention_heads": 2,
        "intermediate_size": 128,
        "max_position_embeddings": 512,
        "num_hidden_layers": 1,
        "dropout": 0.1,
    },
    "sample_rate": 24000,
}
"""The tiny model's ``config.json`` (without its ``vocab`` and ``n_token``)."""

POST_GAIN = 0.3
"""The factor on the random model's last convolution gains (see the module
docstring): its samples then have a median magnitude of ~0.1 and none clip."""

CHECKPOINT_TRANSPOSED = ("predictor.F0_proj.weight", "predictor.N_proj.weight")
"""Keys mlx-audio's ``sanitize`` always transposes from the checkpoint
layout (with every decoder ``noise_convs`` weight); ``weight_v`` kernels it
transposes unless their shape already reads as MLX's."""


def _checkpoint_layout(key: str, value):  # noqa: ANN001, ANN202 - an mx.array in and out
    """``value`` (MLX layout, as the model holds it) as a Kokoro checkpoint
    stores it, so that mlx-audio's ``sanitize`` gives it back unchanged."""
    from mlx_audio.tts.models.base import check_array_shape

    if key in CHECKPOINT_TRANSPOSED or ("noise_convs" in key and key.endswith(".weight")):
        return value.transpose(0, 2, 1)
    if key.endswith("weight_v") and value.ndim == 3 and not check_array_shape(value.transpose(0, 2, 1)):
        return value.transpose(0, 2, 1)
    return value


def vocab() -> dict[str, int]:
    """The phoneme vocabulary: each symbol of :data:`PHONEME_SYMBOLS` to its id."""
    return {symbol: i + 1 for i, symbol in enumerate(dict.fromkeys(PHONEME_SYMBOLS))}


def build_tiny_kokoro(out_dir: Path, seed: int = 0) -> Path:
    """Write a Kokoro model directory with random weights to ``out_dir``
    (``config.json``, ``model.safetensors`` in the checkpoint layout,
    ``voices/*.safetensors``) and return it; an existing build is reused
    (the weights are written last, under their name only once complete, so
    a build cut short is redone rather than reused).

    Raises ImportError without mlx-audio.
    """
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_audio.tts.models.kokoro import Model, ModelConfig

    if (out_dir / "model.safetensors").exists():
        return out_dir
    config = dict(CONFIG, vocab=vocab())
    config["n_token"] = max(config["vocab"].values()) + 1
    mx.random.seed(seed)
    model = Model(ModelConfig.from_dict(config))
    weights = {}
    for key, value in tree_flatten(model.parameters()):
        if key.endswith("weight_v"):
            value = mx.random.normal(value.shape)
        elif key == "decoder.generator.conv_post.weight_g":
            value = value * POST_GAIN
        weights[key] = _checkpoint_layout(key, value)
    mx.eval(weights)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "voices").mkdir(exist_ok=True)
    for name in VOICES:
        pack = mx.random.normal((510, 1, 256)) * 0.1
        mx.save_safetensors(str(out_dir / "voices" / f"{name}.safetensors"), {"voice": pack})
    (out_dir / "config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    partial = out_dir.parent / f".{out_dir.name}.partial.safetensors"  # outside: loaders read every *.safetensors
    mx.save_safetensors(str(partial), weights)
    os.replace(partial, out_dir / "model.safetensors")
    return out_dir
