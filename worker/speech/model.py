"""Load a Kokoro text-to-speech model and synthesise one phoneme chunk.

A speech model is a directory (or a ``package:`` path, or a cached Hugging
Face repo, see :func:`worker.loading.loader.resolve_source`) with
``config.json`` (``model_type`` ``kokoro``, its phoneme ``vocab``),
``*.safetensors`` weights as Kokoro checkpoints store them, and voice packs
in ``voices/<name>.safetensors`` (one ``voice`` tensor of shape
``(510, 1, 256)``: a style vector per phoneme count). The model is built by
mlx-audio's own loader (``mlx_audio.tts.utils.load_model`` given the
resolved local directory as a ``Path``, which it reads without the Hugging
Face hub; the process's environment is left alone), so weights go
through its ``sanitize`` exactly as mlx-audio loads them; it needs the
optional ``speech`` extra (``make`` installs it; elsewhere ``pip install -e '.[speech]'`` in the clone) and is refused
at load, naming the extra, without it.

Synthesis calls the model's own forward (``Model.__call__(phonemes,
style, speed)``, what mlx-audio's ``KokoroPipeline`` calls per chunk) with
the voice pack's row for the chunk's length (``pack[len(phonemes) - 1]``,
as the pipeline picks it). Kokoro's harmonic source draws random noise:
the random generator is seeded with :data:`SYNTHESIS_SEED` before every
chunk, so the same chunk, voice and speed always give the same samples,
whatever else the worker synthesised before.

A voice may be a blend, ``name1,name2``: the mean of the packs (as the
pipeline's ``load_voice`` makes it).

Threads: :meth:`SpeechModel.synthesize`, :meth:`SpeechModel.voice_pack` and
:func:`load_speech_model` touch MLX and run on the scheduler thread only;
:attr:`SpeechModel.voices` and :meth:`SpeechModel.check_voice` are plain
data, safe on the input thread.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from worker.loading.loader import ModelLoadError, resolve_source

SPEECH_EXTRA = "speech"
"""The optional extra that installs mlx-audio, soundfile and the G2P packages."""

SYNTHESIS_SEED = 0
"""The random seed set before each chunk's synthesis (see the module docstring)."""

VOICE_ROWS = 510
"""Style rows in a Kokoro voice pack: the most phonemes one chunk may have."""

MAX_VOICES_NAMED = 20
"""Most voice names a refusal lists."""


class SpeechInputError(ValueError):
    """A speech request the model cannot take; ``field`` is the request field at fault."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass
class SpeechModel:
    """A loaded Kokoro model: ``model`` (mlx-audio's), its ``path``,
    ``sample_rate``, the phonemes one chunk may hold (``max_phonemes``) and
    the voice names found in ``voices/`` (sorted)."""

    model: Any
    path: Path
    family: str
    sample_rate: int
    max_phonemes: int
    voices: list[str]
    _packs: dict[str, Any] = field(default_factory=dict, repr=False)

    def check_voice(self, voice: str) -> None:
        """Refuse a voice (or a blend member) the model does not have.

        Raises:
            SpeechInputError: naming the voice and the model's voices.
        """
        names = [v.strip() for v in voice.split(",")]
        unknown = next((v for v in names if v not in self.voices), None)
        if unknown is None:
            return
        listed = ", ".join(self.voices[:MAX_VOICES_NAMED]) + (" ..." if len(self.voices) > MAX_VOICES_NAMED else "")
        raise SpeechInputError(
            f"voice '{unknown}' is not one of this model's voices ({listed or 'none'}); "
            "GET /v1/audio/voices lists them",
            "voice",
        )

    def voice_pack(self, voice: str) -> Any:
        """The style pack of ``voice`` (a blend: the mean of its packs),
        loaded once. Scheduler thread."""
        pack = self._packs.get(voice)
        if pack is None:
            import mlx.core as mx
            from mlx_audio.tts.models.kokoro.voice import load_voice_tensor

            names = [v.strip() for v in voice.split(",")]
            packs = [load_voice_tensor(str(self.path / "voices" / f"{name}.safetensors")) for name in names]
            pack = packs[0] if len(packs) == 1 else mx.mean(mx.stack(packs), axis=0)
            mx.eval(pack)
            self._packs[voice] = pack
        return pack

    def synthesize(self, phonemes: str, voice: str, speed: float) -> np.ndarray:
        """The audio of one phoneme chunk as float32 samples at
        :attr:`sample_rate` (not yet cleaned: may hold NaN or values beyond
        full scale). Scheduler thread."""
        import mlx.core as mx

        pack = self.voice_pack(voice)
        mx.random.seed(SYNTHESIS_SEED)
        audio = self.model(phonemes, pack[len(phonemes) - 1], speed)
        return np.array(audio.astype(mx.float32), copy=True).reshape(-1)


def load_speech_model(source: str) -> SpeechModel:
    """Load the speech model of ``source`` (see the module docstring).
    Scheduler thread.

    Raises:
        ModelLoadError: the source cannot be resolved, is not a Kokoro model,
            has no voices, or the ``speech`` extra is missing.
    """
    path = resolve_source(source)
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{path} has no readable config.json: {exc}") from None
    family = str(config.get("model_type", "")).lower()
    if family != "kokoro":
        raise ModelLoadError(f"model_type {family!r} is not a speech family mlxd runs (it runs: kokoro)")
    voices = sorted(p.stem for p in (path / "voices").glob("*.safetensors")) if (path / "voices").is_dir() else []
    if not voices:
        raise ModelLoadError(f"{path} has no voice packs (voices/<name>.safetensors)")
    try:
        from mlx_audio.tts.utils import load_model
    except ImportError as exc:
        raise ModelLoadError(
            f"speech models need the '{SPEECH_EXTRA}' extra (make installs it; elsewhere pip install -e '.[{SPEECH_EXTRA}]' in the mlxd clone): {exc}"
        ) from None
    model = load_model(path)
    context = int((config.get("plbert") or {}).get("max_position_embeddings", VOICE_ROWS + 2))
    return SpeechModel(
        model=model,
        path=path,
        family=family,
        sample_rate=int(config.get("sample_rate", 24000)),
        max_phonemes=min(VOICE_ROWS, context - 2),
        voices=voices,
    )
