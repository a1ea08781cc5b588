"""Load a Whisper model for speech to text, with mlx-audio's own classes, in float32 on the CPU.

Why mlx-audio and not mlx-whisper: mlx-audio is already installed by the
``vision`` extra (mlx-vlm depends on it), needs neither torch (mlx-whisper
declares it, which on Linux resolves to a CUDA build of several GB) nor
numba (mlx-whisper's word timings), and covers more speech families; both
packages' Whisper decoders are the same OpenAI-derived design and give
the same tokens on the same weights.

Why not ``mlx_audio.stt.load()``: it builds Whisper in float16 with no
option, which on MLX's CPU backend is about ten times slower than float32;
here the library's ``Model`` is built with the dtype asked for (``auto``:
float32 on the CPU backend, float16 on Metal) and every decode passes
``fp16=False`` unless the model is float16.

A model directory holds ``config.json`` (``model_type`` ``whisper`` and
Whisper's dimensions), ``*.safetensors`` (mlx-audio's or Hugging Face's
tensor names; the library's ``sanitize`` maps them), the tokenizer files of
a ``WhisperProcessor`` (its vocabulary must have Whisper's timestamp
tokens ``<|0.00|>``...) and, for word timestamps, ``alignment_heads`` in
``generation_config.json`` (else the library's default: the last half of
the decoder's heads).

Scheduler thread only (the arrays belong to its stream).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.loading.loader import DTYPES, ModelLoadError, resolve_source


@dataclass
class WhisperModel:
    """A loaded Whisper: the library's ``Model`` (``model``), where it came
    from, its dtype and whether it is multilingual (can detect languages and
    translate; English-only models have no language tokens)."""

    model: Any
    path: Path
    dtype: str

    @property
    def multilingual(self) -> bool:
        """Whether the vocabulary has language and task tokens."""
        return bool(self.model.is_multilingual)

    @property
    def fp16(self) -> bool:
        """What to pass as ``fp16`` to the library's decoding options."""
        return self.dtype == "float16"

    def tokenizer(self, language: str | None, task: str) -> Any:
        """The library's tokenizer wrapper for ``language`` and ``task``."""
        return self.model.get_tokenizer(language=language, task=task)


def load_whisper(source: str, *, dtype: str = "auto") -> WhisperModel:
    """Resolve ``source`` and load its Whisper model and tokenizer (see the
    module docstring). Call on the scheduler thread.

    Raises:
        ModelLoadError: unresolvable source, no or unreadable ``config.json``,
            not a Whisper model, ``quantized``, no weights, weights that do not
            fit the dimensions, or no usable tokenizer.
    """
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten
    from mlx_audio.stt.models.whisper.whisper import Model, ModelDimensions

    if dtype not in DTYPES or dtype == "quantized":
        raise ModelLoadError(f"dtype {dtype!r} is not one of auto, float32, float16, bfloat16 for a Whisper model")
    path = resolve_source(source)
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"model source {source!r}: {exc}") from None
    if str(config.get("model_type", "")).lower() != "whisper":
        raise ModelLoadError(
            f"model source {source!r} is not a Whisper model (model_type {config.get('model_type')!r})"
        )
    if dtype == "auto":
        dtype = "float16" if mx.default_device() == mx.gpu else "float32"
    dims = {k: v for k, v in config.items() if k not in ("model_type", "quantization")}
    model = Model(ModelDimensions.from_dict(dims), dtype=getattr(mx, dtype))
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"model source {source!r}: {path} has no .safetensors weights")
    weights: dict[str, Any] = {}
    for file in files:
        weights.update(mx.load(str(file)))
    weights.pop("alignment_heads", None)
    weights = model.sanitize(weights)
    expected = {name for name, _ in tree_flatten(model.parameters())}
    missing = sorted(expected - weights.keys())
    if missing:
        raise ModelLoadError(f"model source {source!r}: weights missing for {', '.join(missing[:5])}")
    try:
        model.update(tree_unflatten(list(weights.items())))
    except ValueError as exc:
        raise ModelLoadError(f"model source {source!r}: {exc}") from None
    mx.eval(model.parameters())
    model = _with_tokenizer(model, path, source)
    return WhisperModel(model=model, path=path, dtype=dtype)


def _with_tokenizer(model: Any, path: Path, source: str) -> Any:
    """``model`` with its processor and alignment heads (the library's
    post-load hook), checked: the vocabulary must hold the timestamp tokens
    and match the model's size."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = type(model).post_load_hook(model, path)
    processor = getattr(model, "_processor", None)
    if processor is None:
        raise ModelLoadError(f"model source {source!r}: no Whisper tokenizer (tokenizer.json) in {path}")
    vocab = processor.tokenizer.get_vocab()
    if "<|0.00|>" not in vocab or "<|startoftranscript|>" not in vocab:
        raise ModelLoadError(f"model source {source!r}: the tokenizer has no Whisper timestamp or start tokens")
    if len(processor.tokenizer) != model.dims.n_vocab:
        raise ModelLoadError(
            f"model source {source!r}: the tokenizer has {len(processor.tokenizer)} tokens, "
            f"the model {model.dims.n_vocab}"
        )
    return model
