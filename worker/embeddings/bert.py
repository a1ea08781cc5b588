"""A BERT encoder on ``mlx.nn``, for embedding models and cross-encoders.

Module and parameter names follow Hugging Face's ``BertModel`` (and so
mlx-embeddings' ``bert`` model): ``embeddings.word_embeddings``,
``encoder.layer.<i>.attention.self.query``, ... so the weights of a
sentence-transformers model directory or an mlx-embeddings conversion load
as they are (a ``bert.`` prefix is stripped by the loader).

Why BERT runs here rather than on mlx-embeddings: mlx-embeddings depends
on mlx-vlm and transformers>=5, so it is only the optional ``embeddings``
extra; the default embedding model (a BERT) must load on a plain install.
Other families run on mlx-embeddings when it is installed (see
:mod:`worker.embeddings.model`).

The same encoder runs the RoBERTa family's architecture (``roberta``,
``xlm-roberta``, ``camembert``: identical layers, positions counted from
``pad_token_id + 1`` over the real tokens) for cross-encoders
(:mod:`worker.rerank.model`), and takes token-type ids (a pair's second
segment is type 1 in BERT): one encoder for embeddings and reranking.

Every call touches MLX: use it on the worker's scheduler thread only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import mlx.nn as nn

_ACTIVATIONS = {
    "gelu": nn.gelu,
    "gelu_new": nn.gelu_approx,
    "gelu_pytorch_tanh": nn.gelu_approx,
    "gelu_fast": nn.gelu_fast_approx,
    "relu": nn.relu,
    "silu": nn.silu,
}


ROBERTA_FAMILY = frozenset({"roberta", "xlm-roberta", "xlm_roberta", "camembert"})
"""``model_type`` values of the RoBERTa family (BERT's layers, RoBERTa's positions)."""


class UnsupportedModel(ValueError):
    """The model config describes something this encoder cannot run."""


@dataclass(frozen=True)
class BertConfig:
    """The shape of a BERT encoder, read from a model's ``config.json``.

    ``position_offset`` is None for BERT (positions ``0..n-1``) and
    ``pad_token_id`` for the RoBERTa family (a real token's position is
    ``pad_token_id + 1 +`` its index among the real tokens).
    """

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    position_offset: int | None = None

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> BertConfig:
        """Read the fields from ``config``.

        Raises:
            UnsupportedModel: not a ``bert`` or RoBERTa-family model
                (:data:`ROBERTA_FAMILY`), a missing field, an unknown
                activation, or relative position embeddings.
        """
        model_type = config.get("model_type")
        roberta = str(model_type).lower() in ROBERTA_FAMILY
        if model_type != "bert" and not roberta:
            raise UnsupportedModel(
                f"model_type {model_type!r} is not supported by mlxd's encoder (it runs BERT and RoBERTa models)"
            )
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise UnsupportedModel("only absolute position embeddings are supported")
        if config.get("hidden_act", "gelu") not in _ACTIVATIONS:
            raise UnsupportedModel(f"activation {config.get('hidden_act')!r} is not supported")
        try:
            return cls(
                vocab_size=int(config["vocab_size"]),
                hidden_size=int(config["hidden_size"]),
                num_hidden_layers=int(config["num_hidden_layers"]),
                num_attention_heads=int(config["num_attention_heads"]),
                intermediate_size=int(config["intermediate_size"]),
                max_position_embeddings=int(config["max_position_embeddings"]),
                type_vocab_size=int(config.get("type_vocab_size", 2)),
                layer_norm_eps=float(config.get("layer_norm_eps", 1e-12)),
                hidden_act=str(config.get("hidden_act", "gelu")),
                position_offset=int(config.get("pad_token_id") or 0) if roberta else None,
            )
        except KeyError as exc:
            raise UnsupportedModel(f"config.json lacks {exc.args[0]!r}") from None


class _Embeddings(nn.Module):
    """Word + position + token-type embeddings, then a layer norm."""

    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self._offset = c.position_offset
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def __call__(self, ids: mx.array, mask: mx.array, types: mx.array | None) -> mx.array:
        if self._offset is None:
            positions = mx.arange(ids.shape[1])[None, :]
        else:  # RoBERTa: real tokens count from pad + 1; padding sits at the pad position
            real = mask.astype(mx.int32)
            positions = mx.cumsum(real, axis=1) * real + self._offset
        x = self.word_embeddings(ids) + self.position_embeddings(positions)
        kinds = self.token_type_embeddings.weight[0] if types is None else self.token_type_embeddings(types)
        return self.LayerNorm(x + kinds)


class _SelfAttention(nn.Module):
    """Query, key and value projections and scaled dot-product attention."""

    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.heads = c.num_attention_heads
        self.scale = (c.hidden_size // c.num_attention_heads) ** -0.5
        self.query = nn.Linear(c.hidden_size, c.hidden_size)
        self.key = nn.Linear(c.hidden_size, c.hidden_size)
        self.value = nn.Linear(c.hidden_size, c.hidden_size)

    def __call__(self, x: mx.array, mask: mx.array) -> mx.array:
        b, n, d = x.shape

        def split(t: mx.array) -> mx.array:
            return t.reshape(b, n, self.heads, -1).transpose(0, 2, 1, 3)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        out = mx.fast.scaled_dot_product_attention(q, k, v, scale=self.scale, mask=mask)
        return out.transpose(0, 2, 1, 3).reshape(b, n, d)


class _Residual(nn.Module):
    """``LayerNorm(dense(x) + residual)``: BERT's ``*Output`` blocks."""

    def __init__(self, inputs: int, c: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(inputs, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def __call__(self, x: mx.array, residual: mx.array) -> mx.array:
        return self.LayerNorm(self.dense(x) + residual)


class _Attention(nn.Module):
    """Self-attention and its output block (``attention.self``, ``attention.output``)."""

    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.self = _SelfAttention(c)
        self.output = _Residual(c.hidden_size, c)

    def __call__(self, x: mx.array, mask: mx.array) -> mx.array:
        return self.output(self.self(x, mask), x)


class _Intermediate(nn.Module):
    """The feed-forward expansion with the configured activation."""

    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.intermediate_size)
        self._act = _ACTIVATIONS[c.hidden_act]

    def __call__(self, x: mx.array) -> mx.array:
        return self._act(self.dense(x))


class _Layer(nn.Module):
    """One transformer layer."""

    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.attention = _Attention(c)
        self.intermediate = _Intermediate(c)
        self.output = _Residual(c.intermediate_size, c)

    def __call__(self, x: mx.array, mask: mx.array) -> mx.array:
        h = self.attention(x, mask)
        return self.output(self.intermediate(h), h)


class _Encoder(nn.Module):
    """The stack of layers (``encoder.layer.<i>``)."""

    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.layer = [_Layer(c) for _ in range(c.num_hidden_layers)]


class BertModel(nn.Module):
    """The encoder: token ids and their attention mask in, hidden states out.

    ``__call__(ids, mask, types=None)``: ``ids`` int32 ``(batch, length)``
    padded on the right, ``mask`` ``(batch, length)`` with 1 for real tokens
    and 0 for padding, ``types`` the token-type ids ``(batch, length)``
    (None: every token type 0); returns the last hidden states
    ``(batch, length, hidden)``. Padding never influences the real tokens'
    states (it is masked out of attention), so a batch gives each input the
    states it gets alone.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = _Embeddings(config)
        self.encoder = _Encoder(config)

    def __call__(self, ids: mx.array, mask: mx.array, types: mx.array | None = None) -> mx.array:
        x = self.embeddings(ids, mask, types)
        keep = mask[:, None, None, :].astype(mx.bool_)
        additive = mx.where(keep, mx.array(0.0, x.dtype), mx.array(-1e4 if x.dtype != mx.float32 else -1e9, x.dtype))
        for layer in self.encoder.layer:
            x = layer(x, additive)
        return x
