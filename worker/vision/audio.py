"""Decoding a request's audio clip into the waveform a vision model with an
audio tower (Gemma 4, Gemma 3n, Qwen3-Omni) reads; its processor then makes
the features and lays out the clip's tokens (:mod:`worker.vision.inputs`).

Runs on the worker's input thread (never the scheduler thread, never the
gateway's event loop) and touches no MLX: the bytes are decoded from
memory (no file) by mlx-audio's reader (miniaudio: WAV, MP3, FLAC, Vorbis),
down-mixed to mono and resampled to the feature extractor's rate by
mlx-audio's resampler (what mlx-vlm's own ``load_audio`` does).

Limits, checked in this order for each clip:

1. count: at most :data:`MAX_CLIPS` clip per request;
2. container: the bytes must decode as audio with samples;
3. duration: at most ``max_seconds`` seconds.

Every refusal is a :class:`~worker.vision.images.ImageError` naming the clip
by its index among the request's media parts.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from worker.vision.images import ImageError

MAX_CLIPS = 1
"""Audio clips one request may carry (the layout of several clips in one
prompt is not checked against mlx-vlm's yet)."""


@dataclass(frozen=True)
class AudioLimits:
    """Per-request bounds on audio clips (see the module docstring); the
    config's ``audio_max_seconds`` of a model."""

    max_seconds: float = 30.0


def decode_audio(blob: bytes, index: int, limits: AudioLimits, sample_rate: int) -> Any:
    """The mono float32 waveform of clip ``index`` (its bytes ``blob``) at
    ``sample_rate`` Hz.

    Raises:
        ImageError: the bytes are not audio mlx-audio can decode, hold no
            samples, or last longer than ``limits.max_seconds``.
    """
    import numpy as np
    from mlx_audio.audio_io import read
    from mlx_audio.utils import resample_audio

    try:
        samples, rate = read(io.BytesIO(blob), dtype="float32")
    except Exception as exc:  # miniaudio and the format sniffer raise several types
        raise ImageError(
            f"audio {index} is not WAV, MP3, FLAC or Ogg Vorbis audio that can be decoded ({type(exc).__name__})",
            index,
        ) from None
    samples = np.asarray(samples, dtype=np.float32)
    if samples.ndim > 1:
        samples = samples.mean(axis=1)
    if samples.size == 0 or rate <= 0:
        raise ImageError(f"audio {index} holds no samples", index)
    seconds = samples.size / rate
    if seconds > limits.max_seconds:
        raise ImageError(f"audio {index} lasts {seconds:.1f} s, over the limit of {limits.max_seconds:g} s", index)
    if rate != sample_rate:
        samples = resample_audio(samples, rate, sample_rate)
    return np.asarray(samples, dtype=np.float32)
