"""The loading steps every encoder directory shares, for embeddings and rerank.

An encoder directory (an embedding model or a cross-encoder, see
:mod:`worker.embeddings.model` and :mod:`worker.rerank.model`) is opened the
same way whatever runs it: the ``dtype`` is checked, the source resolved
to a local directory (:func:`worker.loading.loader.resolve_source`, which
never touches the network) and its ``config.json`` read
(:func:`open_encoder_directory`); its weights are the directory's
``*.safetensors`` files (:func:`weight_files`), put into the model as MLX
``quantization`` says, strictly, then cast and evaluated
(:func:`install_weights`); and ``sentence_bert_config.json``'s
``max_seq_length`` caps the tokens per input (:func:`token_limit`).

What is each loader's own stays with it: how tensor names map onto its
modules, its heads and pooling, its other limits and the wording of what
the weights must fit. Every error is a
:class:`~worker.loading.loader.ModelLoadError` naming the source.

Scheduler thread: :func:`install_weights` builds MLX arrays on its stream.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from worker.loading.loader import DTYPES, ModelLoadError, cast_weights, resolve_source


def open_encoder_directory(source: str, dtype: str) -> tuple[Path, dict[str, Any]]:
    """The local directory of ``source`` and its parsed ``config.json``.

    ``dtype`` is checked first, against
    :data:`~worker.loading.loader.DTYPES`.

    Raises:
        ModelLoadError: an unknown ``dtype``, an unresolvable source, or a
            ``config.json`` that cannot be read or parsed (naming the
            source).
    """
    if dtype not in DTYPES:
        raise ModelLoadError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    path = resolve_source(source)
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"model source {source!r}: {exc}") from None
    return path, config


def weight_files(path: Path, source: str) -> list[Path]:
    """The ``*.safetensors`` files of the directory ``path``, sorted by name.

    Raises:
        ModelLoadError: there are none (naming ``source`` and ``path``).
    """
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"model source {source!r}: {path} has no .safetensors weights")
    return files


def install_weights(
    model: nn.Module, weights: dict[str, mx.array], config: dict[str, Any], dtype: str, *, source: str, fits: str
) -> str:
    """Put ``weights`` (named as ``model``'s parameters) into ``model``;
    return the effective dtype.

    When ``config`` has a ``quantization`` table (MLX's, as mlx-embeddings
    writes it: ``group_size`` default 64, ``bits`` default 4) the layers
    whose ``<name>.scales`` is among ``weights`` are quantized first. The
    load is strict; then the weights are brought to ``dtype``
    (:func:`~worker.loading.loader.cast_weights`) and the model is put in
    eval mode. ``fits`` names what the weights must fit in the error (``a
    BERT encoder``, ``a cross-encoder``). Scheduler thread.

    Raises:
        ModelLoadError: the weights do not fit the model (missing,
            unexpected or misshapen tensors), naming ``source``.
    """
    quantization = config.get("quantization")
    if isinstance(quantization, dict):
        nn.quantize(
            model,
            group_size=int(quantization.get("group_size", 64)),
            bits=int(quantization.get("bits", 4)),
            class_predicate=lambda name, _module: f"{name}.scales" in weights,
        )
    try:
        model.load_weights(list(weights.items()), strict=True)
    except ValueError as exc:
        raise ModelLoadError(f"model source {source!r}: the weights do not fit {fits}: {exc}") from None
    effective = cast_weights(model, dtype)
    model.eval()
    return effective


def token_limit(path: Path, positions: int, cap: int) -> int:
    """Tokens per input of the encoder directory ``path``: ``positions``
    (its position limit), lowered to ``sentence_bert_config.json``'s
    ``max_seq_length`` when that file gives a positive one, and to ``cap``
    when ``cap`` is not 0. An unreadable file counts as absent."""
    limit = positions
    try:
        st = json.loads((path / "sentence_bert_config.json").read_text(encoding="utf-8"))
        if isinstance(st.get("max_seq_length"), int) and st["max_seq_length"] > 0:
            limit = min(limit, st["max_seq_length"])
    except (OSError, ValueError):
        pass
    return min(limit, cap) if cap else limit
