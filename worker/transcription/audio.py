"""Decode an uploaded audio file, from memory, into 16 kHz mono float32 samples.

Input thread only; numpy, soundfile and soxr, never MLX. Nothing is written
to disk: the bytes are read through a ``BytesIO``.

Formats: what libsndfile (bundled with the ``soundfile`` wheel, 1.2.2)
reads: WAV, FLAC, MP3, OGG Vorbis and OGG Opus (also AIFF, CAF and the
other libsndfile containers). M4A/AAC, MP4 and WebM need ffmpeg, which
mlxd does not call: they are refused as an unknown format.

Every refusal is an :class:`AudioError` whose message names the reason:
an empty file, a format libsndfile does not recognise (unknown or
corrupt), a file whose header says it is longer than ``max_seconds``
(checked before decoding; the decoded frames are capped too, since a
header can lie), or a file with no samples.
"""

from __future__ import annotations

import io

import numpy as np

SAMPLE_RATE = 16000
"""The rate Whisper's features are computed at."""


class AudioError(ValueError):
    """An upload that cannot be transcribed; ``str()`` is the client-facing reason."""


def decode_audio(data: bytes, max_seconds: float) -> np.ndarray:
    """``data`` (a whole audio file) as mono float32 samples at
    :data:`SAMPLE_RATE` (channels averaged, resampled with soxr's high
    quality filter).

    Raises:
        AudioError: empty, unknown or corrupt, longer than ``max_seconds``
            (0: no limit), or without samples.
    """
    import soundfile as sf
    import soxr

    if not data:
        raise AudioError("the audio file is empty")
    try:
        with sf.SoundFile(io.BytesIO(data)) as file:
            rate = file.samplerate
            declared = file.frames / rate if rate else 0.0
            if max_seconds and declared > max_seconds:
                raise AudioError(
                    f"the audio is {declared:.1f} seconds long; this model takes at most {max_seconds:g} seconds"
                )
            cap = int(max_seconds * rate) + 1 if max_seconds else -1
            samples = file.read(frames=cap, dtype="float32", always_2d=True)
    except AudioError:
        raise
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise AudioError(
            "the audio file could not be decoded (an unknown format or a corrupt file; "
            f"WAV, FLAC, MP3, OGG Vorbis and OGG Opus are read): {_reason(exc)}"
        ) from None
    if max_seconds and len(samples) > max_seconds * rate:
        raise AudioError(f"the audio is longer than this model's limit of {max_seconds:g} seconds")
    if len(samples) == 0:
        raise AudioError("the audio file holds no samples")
    mono = samples.mean(axis=1) if samples.shape[1] > 1 else samples[:, 0]
    if rate != SAMPLE_RATE:
        mono = soxr.resample(mono, rate, SAMPLE_RATE, quality="HQ")
    return np.ascontiguousarray(mono, dtype=np.float32)


def _reason(exc: Exception) -> str:
    """libsndfile's own words for a failure, without the stream's repr."""
    text = str(exc)
    return text.split(": ", 1)[-1] if "<_io.BytesIO" in text else text
