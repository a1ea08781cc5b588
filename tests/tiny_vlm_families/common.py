"""What every tiny family builder shares: the tokenizer trained here, JSON
config files and the weights file (with optional per-weight scales)."""

from __future__ import annotations

import json
from pathlib import Path

CORPUS = [
    "Hi there, hello. What is in this image? Describe the picture, the colour and the shape.",
    "user model assistant system User: Assistant: [INST] [/INST]",
] * 20
"""Text the tiny tokenizers are trained on."""


def train_tokenizer(specials: list[str], roles: dict[str, str], vocab_size: int = 400, **tokens: str):
    """Return a ``PreTrainedTokenizerFast`` wrapping a byte-level BPE
    tokenizer trained on :data:`CORPUS` with at most ``vocab_size`` tokens,
    with ``specials`` as special tokens (in that order, ids from 0),
    ``roles`` as named extra special tokens (``tokenizer.<role>`` gives the
    token) and ``tokens`` (bos_token, eos_token, ...) set. Deterministic:
    the same arguments give the same vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, extra_special_tokens=roles, **tokens)


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` to ``path`` as indented JSON, replacing the file."""
    path.write_text(json.dumps(data, indent=2))


def save_model(model, out_dir: Path, scales: dict[str, float] | None = None) -> None:
    """Save ``model``'s parameters to ``out_dir / "model.safetensors"``
    (names as ``tree_flatten`` gives them), multiplying each whose name ends
    with a key of ``scales`` by that factor; the model itself is unchanged."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    weights = dict(tree_flatten(model.parameters()))
    for name, value in weights.items():
        for suffix, factor in (scales or {}).items():
            if name.endswith(suffix):
                weights[name] = value * factor
    mx.save_safetensors(str(out_dir / "model.safetensors"), weights)
