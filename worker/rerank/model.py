"""Load a cross-encoder (reranker) directory and score query-document pairs.

A rerank source is a Hugging Face ``*ForSequenceClassification``
checkpoint (``config.json``, ``*.safetensors``, ``tokenizer.json``), the
layout cross-encoders such as ms-marco-MiniLM (BERT) and bge-reranker
(XLM-RoBERTa) ship. It runs on mlxd's own encoder
(:class:`~worker.embeddings.bert.BertModel`, one encoder for embeddings
and reranking) with the checkpoint's classification head:

- **BERT** (``model_type`` ``bert``): ``bert.pooler.dense`` + tanh on the
  first token, then ``classifier``; the pair is ``[CLS] q [SEP] d [SEP]``
  with token type 1 on the document, as the tokenizer's template says.
- **RoBERTa family** (``roberta``, ``xlm-roberta``, ``camembert``):
  ``classifier.dense`` + tanh on ``<s>``, then ``classifier.out_proj``;
  every token type 0; positions counted from ``pad_token_id + 1``.

The score of a pair (``relevance_score``) follows the config as
sentence-transformers' ``CrossEncoder`` does: with one label, the sigmoid
of the logit unless ``config.json`` names another activation
(``sentence_transformers.activation_fn`` or
``sbert_ce_default_activation_function``: ``Identity`` gives the raw
logit, ``Sigmoid`` the sigmoid); with two labels, the softmax probability
of the second (the "relevant" one). More labels are refused at load.

The most tokens per pair (special tokens included) is the model's
position limit (for the RoBERTa family ``max_position_embeddings`` less the
``pad_token_id + 1`` positions it reserves), capped by
``sentence_bert_config.json``'s ``max_seq_length`` or ``config.json``'s
``max_length`` when present, and by the configured ``context_length``.

Threads: :class:`PairTokenizer` runs on the worker's input thread (no
MLX); :meth:`RerankModel.encode` and :func:`load_rerank_model` touch MLX
and run on the scheduler thread only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from shared.protocol import RerankRequest
from worker.embeddings.bert import BertConfig, BertModel
from worker.embeddings.encoder_files import install_weights, open_encoder_directory, token_limit, weight_files
from worker.loading.loader import ModelLoadError


class RerankInputError(Exception):
    """A rerank request's texts cannot be scored; ``kind`` is the wire
    ``ErrorKind`` and ``field`` the request field at fault."""

    def __init__(self, kind: str, message: str, field: str | None = "documents") -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.field = field


@dataclass(frozen=True)
class Pair:
    """One query-document pair as the encoder takes it: token ids and
    their token types (equal lengths). ``len()`` is its token count."""

    ids: list[int]
    types: list[int] = field(repr=False)

    def __len__(self) -> int:
        return len(self.ids)


class PairTokenizer:
    """Turns a :class:`~shared.protocol.RerankRequest` into :class:`Pair` s.

    Uses the ``tokenizers`` library with the file's own pair template
    (padding and truncation turned off: the file's settings often pad or
    cut every input to a fixed length); ``max_tokens`` is the limit per
    pair, ``zero_types`` gives every token type 0 (the RoBERTa family).
    One caller at a time (the input thread); no MLX.
    """

    def __init__(self, path: Path, max_tokens: int, *, zero_types: bool) -> None:
        from tokenizers import Tokenizer

        file = path / "tokenizer.json"
        if not file.is_file():
            raise ModelLoadError(f"{path} has no tokenizer.json")
        tokenizer = Tokenizer.from_file(str(file))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self._tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.frame = tokenizer.num_special_tokens_to_add(is_pair=True)
        self._zero_types = zero_types

    def prepare(self, request: RerankRequest) -> list[Pair]:
        """The pair of the query with each document, in document order.

        Raises:
            RerankInputError: no documents or an empty text
                (``invalid_request``); a pair over :attr:`max_tokens`
                without ``truncate``, or a query that leaves no room for
                any document text (``context_length_exceeded``).
        """
        if not request.query:
            raise RerankInputError("invalid_request", "the query is empty", "query")
        if not request.documents:
            raise RerankInputError("invalid_request", "the request has no documents")
        query = self._tokenizer.encode(request.query, add_special_tokens=False)
        room = self.max_tokens - self.frame - len(query.ids)
        if room < 1:
            raise RerankInputError(
                "context_length_exceeded",
                f"the query has {len(query.ids)} tokens; with the model's {self.frame} special tokens that leaves "
                f"no room for a document within its limit of {self.max_tokens} tokens per pair (shorten the query)",
                "query",
            )
        documents = self._tokenizer.encode_batch(list(request.documents), add_special_tokens=False)
        pairs = []
        for i, (text, document) in enumerate(zip(request.documents, documents)):
            if not text:
                raise RerankInputError("invalid_request", f"documents[{i}] is empty")
            if len(document.ids) > room:
                if not request.truncate:
                    total = len(query.ids) + len(document.ids) + self.frame
                    raise RerankInputError(
                        "context_length_exceeded",
                        f"documents[{i}] makes a pair of {total} tokens with the query; this model takes at most "
                        f"{self.max_tokens} per pair (shorten it, or set truncate to cut documents to the limit)",
                    )
                document.truncate(room)
            encoded = self._tokenizer.post_process(query, document, add_special_tokens=True)
            types = [0] * len(encoded.ids) if self._zero_types else list(encoded.type_ids)
            pairs.append(Pair(list(encoded.ids), types))
        return pairs


class _BertHead(nn.Module):
    """BERT's pooler (dense + tanh on the first token) and classifier;
    names as Hugging Face's ``BertForSequenceClassification`` (pooler
    moved from ``bert.pooler.dense``)."""

    def __init__(self, hidden: int, labels: int) -> None:
        super().__init__()
        self.pooler = nn.Linear(hidden, hidden)
        self.classifier = nn.Linear(hidden, labels)

    def __call__(self, states: mx.array) -> mx.array:
        return self.classifier(mx.tanh(self.pooler(states[:, 0])))


class _RobertaHead(nn.Module):
    """RoBERTa's classification head: dense + tanh on ``<s>``, then
    ``out_proj`` (Hugging Face's ``classifier.dense`` / ``classifier.out_proj``)."""

    def __init__(self, hidden: int, labels: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.out_proj = nn.Linear(hidden, labels)

    def __call__(self, states: mx.array) -> mx.array:
        return self.out_proj(mx.tanh(self.dense(states[:, 0])))


class CrossEncoder(nn.Module):
    """mlxd's encoder and a classification head: ``(ids, mask, types)`` in
    (as :class:`~worker.embeddings.bert.BertModel` takes them), logits
    ``(batch, labels)`` out. ``roberta`` picks the RoBERTa head."""

    def __init__(self, config: BertConfig, labels: int, *, roberta: bool) -> None:
        super().__init__()
        self.encoder = BertModel(config)
        head = _RobertaHead if roberta else _BertHead
        self.head = head(config.hidden_size, labels)

    def __call__(self, ids: mx.array, mask: mx.array, types: mx.array) -> mx.array:
        return self.head(self.encoder(ids, mask, types))


@dataclass
class RerankModel:
    """A loaded cross-encoder; see the module docstring.

    ``activation`` is ``sigmoid``, ``identity`` or ``softmax`` (two labels,
    the second's probability); ``pad_id`` fills a batch past each pair's
    end; ``dtype`` is the effective weight dtype.
    """

    model: CrossEncoder
    tokenizer: PairTokenizer
    path: Path
    max_tokens: int
    dtype: str
    activation: str
    pad_id: int = 0
    config: dict[str, Any] = field(default_factory=dict, repr=False)

    def encode(self, batch: list[Pair]) -> np.ndarray:
        """The relevance scores of ``batch``, float32 ``(len(batch),)``.

        Pads to the longest pair; padding changes no score. Scheduler
        thread only.
        """
        length = max(len(pair) for pair in batch)
        ids = np.full((len(batch), length), self.pad_id, dtype=np.int32)
        types = np.zeros((len(batch), length), dtype=np.int32)
        mask = np.zeros((len(batch), length), dtype=np.int32)
        for row, pair in enumerate(batch):
            ids[row, : len(pair)] = pair.ids
            types[row, : len(pair)] = pair.types
            mask[row, : len(pair)] = 1
        logits = self.model(mx.array(ids), mx.array(mask), mx.array(types)).astype(mx.float32)
        if self.activation == "softmax":
            scores = mx.softmax(logits, axis=-1)[:, -1]
        elif self.activation == "sigmoid":
            scores = mx.sigmoid(logits[:, 0])
        else:
            scores = logits[:, 0]
        mx.eval(scores)
        return np.array(scores, copy=True)


def _labels(config: dict[str, Any]) -> int:
    """How many labels the classifier has (``id2label``, else ``num_labels``, else 1)."""
    names = config.get("id2label")
    if isinstance(names, dict) and names:
        return len(names)
    return int(config.get("num_labels") or 1)


def score_activation(config: dict[str, Any], labels: int) -> str:
    """``sigmoid``, ``identity`` or ``softmax`` for a classifier with
    ``labels`` labels and this ``config.json`` (see the module docstring).

    Raises:
        ModelLoadError: more than two labels, or a named activation
            other than sigmoid and identity.
    """
    if labels == 2:
        return "softmax"
    if labels != 1:
        raise ModelLoadError(f"the classifier has {labels} labels; a reranker scores with one label (or two: softmax)")
    named = config.get("sentence_transformers", {})
    name = named.get("activation_fn") if isinstance(named, dict) else None
    name = name or config.get("sbert_ce_default_activation_function")
    if not name:
        return "sigmoid"
    last = str(name).rpartition(".")[2].lower()
    if last in ("sigmoid", "identity"):
        return last
    raise ModelLoadError(f"score activation {name!r} is not supported (sigmoid or identity)")


def _max_tokens(path: Path, config: dict[str, Any], positions: int, cap: int) -> int:
    """Tokens per pair: the position limit, capped as the module docstring says
    (``config.json``'s ``max_length`` here, the rest by
    :func:`~worker.embeddings.encoder_files.token_limit`)."""
    if isinstance(config.get("max_length"), int) and config["max_length"] > 0:
        positions = min(positions, config["max_length"])
    return token_limit(path, positions, cap)


def load_rerank_model(source: str, *, dtype: str = "auto", context_length: int = 0) -> RerankModel:
    """Resolve ``source`` and load its cross-encoder and tokenizer.

    ``dtype`` as for :func:`worker.loading.loader.load_model` (``auto``:
    float32 on the CPU backend); ``context_length`` (0: none) caps tokens
    per pair. Call on the scheduler thread: the arrays belong to its stream.

    Raises:
        ModelLoadError: unresolvable source, a ``model_type`` other than
            BERT and the RoBERTa family, an unsupported head or activation,
            missing or mismatched weights, no ``tokenizer.json``, or a
            limit too small for the special tokens and two more.
    """
    path, config_dict = open_encoder_directory(source, dtype)
    try:
        config = BertConfig.from_dict(config_dict)
    except ValueError as exc:  # UnsupportedModel is a ValueError
        raise ModelLoadError(f"model source {source!r}: {exc}") from None
    roberta = config.position_offset is not None
    labels = _labels(config_dict)
    activation = score_activation(config_dict, labels)
    model = CrossEncoder(config, labels, roberta=roberta)
    weights = _read_weights(path, source, roberta)
    effective = install_weights(model, weights, config_dict, dtype, source=source, fits="a cross-encoder")
    positions = config.max_position_embeddings - (config.position_offset + 1 if roberta else 0)
    max_tokens = _max_tokens(path, config_dict, positions, context_length)
    tokenizer = PairTokenizer(path, max_tokens, zero_types=roberta)
    if max_tokens < tokenizer.frame + 2:
        raise ModelLoadError(f"model source {source!r}: a limit of {max_tokens} tokens leaves no room for a pair")
    pad = config_dict.get("pad_token_id")
    return RerankModel(
        model=model,
        tokenizer=tokenizer,
        path=path,
        max_tokens=max_tokens,
        dtype=effective,
        activation=activation,
        pad_id=pad if isinstance(pad, int) and pad >= 0 else 0,
        config=config_dict,
    )


def _read_weights(path: Path, source: str, roberta: bool) -> dict[str, mx.array]:
    """Every tensor of the directory's safetensors files under this
    module's names: the encoder's prefix (``bert.`` / ``roberta.``)
    becomes ``encoder.``, the pooler and classifier move under ``head.``;
    ``position_ids`` buffers (and a RoBERTa encoder's unused pooler) are
    dropped."""
    prefix = "roberta." if roberta else "bert."
    weights: dict[str, mx.array] = {}
    for file in weight_files(path, source):
        for name, array in mx.load(str(file)).items():
            if name.endswith("position_ids") or (roberta and name.startswith(prefix + "pooler.")):
                continue  # buffers, and a RoBERTa pooler its head does not use
            if name.startswith(prefix + "pooler.dense."):
                name = "head.pooler." + name.removeprefix(prefix + "pooler.dense.")
            elif name.startswith(prefix):
                name = "encoder." + name.removeprefix(prefix)
            elif name.startswith("classifier."):
                rest = name.removeprefix("classifier.")
                name = "head." + (rest if roberta else "classifier." + rest)
            weights[name] = array
    return weights
