"""Load an embedding model directory and turn token ids into vectors.

A source for an embedding model is a directory (or a ``package:`` path, or
a cached Hugging Face repo, see :func:`worker.loading.loader.resolve_source`) with
``config.json``, ``*.safetensors`` weights and ``tokenizer.json``. Two
engines run it:

- **mlxd's own BERT encoder** (:mod:`worker.embeddings.bert`) for ``model_type``
  ``bert``: weights named as in Hugging Face's ``BertModel`` (an optional
  ``bert.`` prefix is stripped; the pooler, masked-LM heads and
  ``position_ids`` buffers are ignored; MLX ``quantization`` as
  mlx-embeddings writes it is understood). That covers sentence-transformers
  directories and mlx-embeddings conversions of BERT models, the default
  model among them, with no extra dependency.
- **mlx-embeddings** (the optional ``embeddings`` extra,
  ``make`` installs it; elsewhere ``pip install -e '.[embeddings]'`` in the clone) for every other ``model_type`` it has
  a model class for (XLM-RoBERTa, with ``roberta`` and ``camembert`` run as
  the same architecture; ModernBERT, Qwen3, Gemma 3, ...) and for BERT
  configs mlxd's encoder refuses. Only its model classes and weight loader
  are used (``mlx_embeddings.utils.load_model`` given the resolved local
  directory as a ``Path``, which it reads without the Hugging Face hub; the
  process's environment is left alone): never its hub download nor its
  transformers tokenizer. Without the extra such a
  directory is refused at load, naming the extra.

Pooling and normalization follow the sentence-transformers metadata when
present (``modules.json``; its ``Pooling`` module's ``config.json``: CLS,
mean, max, mean-sqrt-len or last-token pooling, several concatenated in
sentence-transformers' order; a ``Normalize`` module L2-normalizes), on
either engine: the token states are pooled here. A directory without it
gets mean pooling and L2 normalization on mlxd's encoder; on mlx-embeddings
it gets the model class's own pooled, normalized ``text_embeds`` (mean for
the encoders, the last token for Qwen3), or mean pooling and L2
normalization when the class returns no pooled vector (ModernBERT).
Modules that change the vectors further (``Dense``) are refused at load.

The most tokens per input is ``max_seq_length`` of
``sentence_bert_config.json``, else the model's position limit (for the
RoBERTa family, ``max_position_embeddings`` less the ``pad_token_id + 1``
positions it reserves), capped by the config's ``context_length``; special
tokens count.

Threads: :class:`EmbeddingTokenizer` is used on the worker's input thread
(no MLX); :meth:`EmbeddingModel.encode` and :func:`load_embedding_model`
touch MLX and run on the scheduler thread only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from shared.protocol import EmbedRequest
from worker.embeddings.bert import BertConfig, BertModel, UnsupportedModel
from worker.embeddings.encoder_files import install_weights, open_encoder_directory, token_limit, weight_files
from worker.loading.loader import ModelLoadError, cast_weights

POOLING_ORDER = ("cls", "max", "mean", "mean_sqrt_len", "lasttoken")
"""Pooling modes this module implements, in the order sentence-transformers
concatenates them."""

_IGNORED_PREFIXES = ("pooler.", "cls.", "lm_head.")

EMBEDDINGS_EXTRA = "embeddings"
"""The optional extra that installs mlx-embeddings (``make`` installs it; elsewhere ``pip install -e '.[embeddings]'`` in the clone)."""

_MLX_EMBEDDINGS_ALIASES = {"roberta": "xlm_roberta", "camembert": "xlm_roberta"}
"""``model_type`` values mlx-embeddings has no module for but whose
architecture one of its modules runs unchanged."""

_ROBERTA_FAMILY = frozenset({"roberta", "xlm-roberta", "xlm_roberta", "camembert"})


class EmbeddingInputError(Exception):
    """An embedding request's inputs cannot be encoded; ``kind`` is the
    wire ``ErrorKind`` and ``field`` the request field at fault."""

    def __init__(self, kind: str, message: str, field: str | None = "input") -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.field = field


@dataclass(frozen=True)
class Pooling:
    """How token states become one vector: ``modes`` (see
    :data:`POOLING_ORDER`), concatenated, then L2-normalized if ``normalize``."""

    modes: tuple[str, ...] = ("mean",)
    normalize: bool = True


class EmbeddingTokenizer:
    """Turns an :class:`~shared.protocol.EmbedRequest` into token id lists.

    ``max_tokens`` is the limit per input (special tokens included) and
    ``vocab_size`` the model's vocabulary. Uses the ``tokenizers`` library
    with padding and truncation turned off (sentence-transformers' files
    often pad or cut every input to a fixed length). Thread-safe for one
    caller at a time; no MLX.
    """

    def __init__(self, path: Path, max_tokens: int, vocab_size: int) -> None:
        from tokenizers import Tokenizer

        file = path / "tokenizer.json"
        if not file.is_file():
            raise ModelLoadError(f"{path} has no tokenizer.json")
        tokenizer = Tokenizer.from_file(str(file))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self._tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.vocab_size = vocab_size
        self.prefix, self.suffix = _special_frame(tokenizer)

    def encode_probe(self) -> list[int]:
        """The ids of one short word without special tokens (probing a model's output shape)."""
        return self._tokenizer.encode("hello", add_special_tokens=False).ids or [0]

    def prepare(self, request: EmbedRequest) -> list[list[int]]:
        """The token ids of every input of ``request``, in order.

        Raises:
            EmbeddingInputError: no inputs, an empty input, a token id
                outside the vocabulary (``invalid_request``), or an input
                over :attr:`max_tokens` without ``truncate``
                (``context_length_exceeded``).
        """
        if request.texts:
            encoded = [e.ids for e in self._tokenizer.encode_batch(list(request.texts), add_special_tokens=True)]
            sources = request.texts
        elif request.token_ids:
            for i, ids in enumerate(request.token_ids):
                bad = next((t for t in ids if not 0 <= t < self.vocab_size), None)
                if bad is not None:
                    raise EmbeddingInputError(
                        "invalid_request",
                        f"input[{i}] holds token id {bad}, outside the model's vocabulary of {self.vocab_size}",
                    )
            encoded = [[*self.prefix, *ids, *self.suffix] for ids in request.token_ids]
            sources = request.token_ids
        else:
            raise EmbeddingInputError("invalid_request", "the request has no inputs")
        out: list[list[int]] = []
        for i, (ids, source) in enumerate(zip(encoded, sources)):
            if not source:
                raise EmbeddingInputError("invalid_request", f"input[{i}] is empty")
            if len(ids) > self.max_tokens:
                if not request.truncate:
                    raise EmbeddingInputError(
                        "context_length_exceeded",
                        f"input[{i}] has {len(ids)} tokens; this model takes at most {self.max_tokens} per input "
                        "(shorten it, or set truncate: true to cut it to the limit)",
                    )
                ids = ids[: self.max_tokens - len(self.suffix)] + self.suffix
            out.append(list(ids))
        return out


def _special_frame(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after a text
    (BERT: ``[CLS]`` and ``[SEP]``), found by encoding a probe word."""
    plain = tokenizer.encode("hello", add_special_tokens=False).ids
    full = tokenizer.encode("hello", add_special_tokens=True).ids
    for start in range(len(full) - len(plain) + 1):
        if plain and full[start : start + len(plain)] == plain:
            return full[:start], full[start + len(plain) :]
    return [], []


@dataclass
class EmbeddingModel:
    """A loaded encoder with its pooling; see the module docstring.

    ``dim`` is the vector length, ``max_tokens`` the limit per input,
    ``dtype`` the effective weight dtype, ``engine`` ``mlxd`` (our BERT
    encoder, :class:`~worker.embeddings.bert.BertModel`) or ``mlx-embeddings`` (one of
    its model classes). ``pad_id`` fills the batch past each input's end;
    ``own_pooling`` (mlx-embeddings only) takes the model's pooled
    ``text_embeds`` instead of pooling its token states with ``pooling``.
    """

    model: Any
    tokenizer: EmbeddingTokenizer
    pooling: Pooling
    path: Path
    dim: int
    max_tokens: int
    dtype: str
    config: dict[str, Any] = field(default_factory=dict, repr=False)
    engine: str = "mlxd"
    pad_id: int = 0
    own_pooling: bool = False

    def encode(self, batch: list[list[int]]) -> np.ndarray:
        """The vectors of ``batch`` (token id lists), float32 ``(len(batch), dim)``.

        Pads to the longest input; padding does not change any vector.
        Scheduler thread only.
        """
        length = max(len(ids) for ids in batch)
        ids = np.full((len(batch), length), self.pad_id, dtype=np.int32)
        mask = np.zeros((len(batch), length), dtype=np.int32)
        for row, tokens in enumerate(batch):
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        m = mx.array(mask)
        if self.engine == "mlx-embeddings":
            output = self.model(mx.array(ids), attention_mask=m)
            if self.own_pooling:
                vectors = output.text_embeds
            else:
                vectors = pool(output.last_hidden_state, m, self.pooling)
        else:
            vectors = pool(self.model(mx.array(ids), m), m, self.pooling)
        out = vectors.astype(mx.float32)
        mx.eval(out)
        return np.array(out, copy=True)


def pool(states: mx.array, mask: mx.array, pooling: Pooling) -> mx.array:
    """Pool hidden ``states`` ``(batch, length, hidden)`` over the real tokens
    of ``mask`` ``(batch, length)`` as ``pooling`` says; MLX, scheduler thread."""
    m = mask.astype(states.dtype)[..., None]
    counts = mx.maximum(m.sum(axis=1), 1e-9)
    parts = []
    for mode in pooling.modes:
        if mode == "cls":
            parts.append(states[:, 0])
        elif mode == "max":
            parts.append(mx.where(m > 0, states, mx.array(-1e9, states.dtype)).max(axis=1))
        elif mode == "mean":
            parts.append((states * m).sum(axis=1) / counts)
        elif mode == "mean_sqrt_len":
            parts.append((states * m).sum(axis=1) / mx.sqrt(counts))
        elif mode == "lasttoken":
            last = mask.astype(mx.int32).sum(axis=1) - 1
            parts.append(mx.take_along_axis(states, last[:, None, None], axis=1)[:, 0])
    vectors = parts[0] if len(parts) == 1 else mx.concatenate(parts, axis=-1)
    if pooling.normalize:
        vectors = vectors / mx.maximum(mx.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
    return vectors


def read_pooling(path: Path) -> Pooling:
    """The pooling of a model directory (see the module docstring).

    Raises:
        ModelLoadError: a sentence-transformers module mlxd does not run
            (``Dense``, weighted-mean pooling, ...).
    """
    modules_file = path / "modules.json"
    if not modules_file.is_file():
        return Pooling()
    try:
        modules = json.loads(modules_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{modules_file}: {exc}") from None
    modes: tuple[str, ...] = ("mean",)
    normalize = False
    for module in modules:
        kind = str(module.get("type", "")).rpartition(".")[2]
        if kind == "Transformer":
            continue
        if kind == "Normalize":
            normalize = True
        elif kind == "Pooling":
            modes = _pooling_modes(path / str(module.get("path", "")) / "config.json")
        else:
            raise ModelLoadError(f"{path}: sentence-transformers module {kind!r} is not supported")
    return Pooling(modes=modes, normalize=normalize)


def _pooling_modes(file: Path) -> tuple[str, ...]:
    """The pooling modes switched on in a ``Pooling`` module's config."""
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{file}: {exc}") from None
    if "pooling_mode" in config:  # newer sentence-transformers: one name
        names = {str(config["pooling_mode"]).replace("_tokens", "").replace("_token", "")}
    else:
        names = {
            key[len("pooling_mode_") :].replace("_tokens", "").replace("_token", "")
            for key, on in config.items()
            if key.startswith("pooling_mode_") and on is True
        }
    unknown = names - set(POOLING_ORDER)
    if unknown or not names:
        raise ModelLoadError(f"{file}: pooling {sorted(unknown) or 'none'} is not supported")
    return tuple(mode for mode in POOLING_ORDER if mode in names)


def load_embedding_model(source: str, *, dtype: str = "auto", context_length: int = 0) -> EmbeddingModel:
    """Resolve ``source`` and load its encoder, tokenizer and pooling.

    ``model_type`` ``bert`` runs on mlxd's encoder; anything else (or a BERT
    config that encoder refuses) on mlx-embeddings when it is installed
    (see the module docstring). ``dtype`` as for
    :func:`worker.loading.loader.load_model` (``auto``: float32 on the CPU backend).
    ``context_length`` (0: none) caps tokens per input. Call on the
    scheduler thread: the arrays belong to its stream.

    Raises:
        ModelLoadError: unresolvable source, a model neither engine runs
            (or mlx-embeddings not installed, naming the extra), missing or
            mismatched weights, no ``tokenizer.json``, or a
            ``context_length`` too small for the special tokens and one
            more.
    """
    path, config_dict = open_encoder_directory(source, dtype)
    try:
        if config_dict.get("model_type") != "bert":  # other families' embedding models: mlx-embeddings
            raise UnsupportedModel(
                f"model_type {config_dict.get('model_type')!r} is not supported by mlxd's encoder for embeddings "
                "(it embeds with BERT models)"
            )
        config = BertConfig.from_dict(config_dict)
    except (UnsupportedModel, ValueError, KeyError) as exc:
        return _load_with_mlx_embeddings(path, source, config_dict, dtype, context_length, refused=str(exc))
    return _load_bert(path, source, config, config_dict, dtype, context_length)


def _load_bert(
    path: Path, source: str, config: BertConfig, config_dict: dict[str, Any], dtype: str, context_length: int
) -> EmbeddingModel:
    """Load a BERT directory on mlxd's own encoder."""
    model = BertModel(config)
    weights = _read_weights(path, source)
    effective = install_weights(model, weights, config_dict, dtype, source=source, fits="a BERT encoder")
    max_tokens = token_limit(path, config.max_position_embeddings, context_length)
    pooling = read_pooling(path)
    hidden = config.hidden_size * len(pooling.modes)
    tokenizer = EmbeddingTokenizer(path, max_tokens, config.vocab_size)
    if max_tokens <= len(tokenizer.prefix) + len(tokenizer.suffix):
        raise ModelLoadError(f"model source {source!r}: context_length {max_tokens} leaves no room for any text")
    return EmbeddingModel(
        model=model,
        tokenizer=tokenizer,
        pooling=pooling,
        path=path,
        dim=hidden,
        max_tokens=max_tokens,
        dtype=effective,
        config=config_dict,
    )


def _load_with_mlx_embeddings(
    path: Path, source: str, config_dict: dict[str, Any], dtype: str, context_length: int, *, refused: str
) -> EmbeddingModel:
    """Load a directory mlxd's encoder does not run with mlx-embeddings'
    model classes (local files only: given a ``Path``, its loader reads it
    without the hub); ``refused`` is why mlxd's encoder declined, for the
    error when mlx-embeddings cannot help."""
    model_type = str(config_dict.get("model_type", ""))
    try:
        from mlx_embeddings import utils as mlx_embeddings_utils
    except ImportError:
        raise ModelLoadError(
            f"model source {source!r}: {refused}; other embedding models run on mlx-embeddings, "
            f"which is not installed (make installs it; elsewhere pip install -e '.[{EMBEDDINGS_EXTRA}]' in the mlxd clone)"
        ) from None

    def classes(config: dict[str, Any]) -> Any:
        kind = config["model_type"].replace("-", "_")
        return mlx_embeddings_utils._get_classes({**config, "model_type": _MLX_EMBEDDINGS_ALIASES.get(kind, kind)})

    try:
        classes(config_dict)
    except (ValueError, KeyError):
        raise ModelLoadError(
            f"model source {source!r}: {refused}, and mlx-embeddings has no model for model_type {model_type!r}"
        ) from None
    pooling: Pooling | None = read_pooling(path) if (path / "modules.json").is_file() else None
    try:
        model = mlx_embeddings_utils.load_model(path, get_model_classes=classes, path_to_repo=str(path))
    except FileNotFoundError as exc:
        raise ModelLoadError(f"model source {source!r}: {exc}") from None
    except (ValueError, TypeError, KeyError) as exc:
        detail = str(exc) if len(str(exc)) <= 400 else str(exc)[:400] + " ..."
        raise ModelLoadError(
            f"model source {source!r}: mlx-embeddings cannot load it as model_type {model_type!r}: {detail}"
        ) from None
    effective = cast_weights(model, dtype)
    model.eval()
    positions = int(config_dict.get("max_position_embeddings") or 512)
    pad = config_dict.get("pad_token_id")
    pad_id = pad if isinstance(pad, int) and pad >= 0 else 0
    if model_type.lower() in _ROBERTA_FAMILY:
        positions -= pad_id + 1  # position ids start after the padding index
    max_tokens = token_limit(path, positions, context_length)
    vocab_size = int(config_dict.get("vocab_size") or 0)
    tokenizer = EmbeddingTokenizer(path, max_tokens, vocab_size or 1 << 31)
    if max_tokens <= len(tokenizer.prefix) + len(tokenizer.suffix):
        raise ModelLoadError(f"model source {source!r}: context_length {max_tokens} leaves no room for any text")
    embedding = EmbeddingModel(
        model=model,
        tokenizer=tokenizer,
        pooling=pooling or Pooling(),
        path=path,
        dim=0,
        max_tokens=max_tokens,
        dtype=effective,
        config=config_dict,
        engine="mlx-embeddings",
        pad_id=pad_id,
    )
    probe = [[*tokenizer.prefix, *tokenizer.encode_probe(), *tokenizer.suffix]]
    if pooling is None:  # the model class's own pooling, when it pools
        ids = mx.array(probe, dtype=mx.int32)
        embeds = getattr(model(ids, attention_mask=mx.ones(ids.shape, dtype=mx.int32)), "text_embeds", None)
        embedding.own_pooling = embeds is not None and embeds.ndim == 2
    embedding.dim = int(embedding.encode(probe).shape[1])
    return embedding


def _read_weights(path: Path, source: str) -> dict[str, mx.array]:
    """Every encoder weight of the directory's safetensors files, with the
    ``bert.`` prefix stripped and unused tensors dropped."""
    weights: dict[str, mx.array] = {}
    for file in weight_files(path, source):
        for name, array in mx.load(str(file)).items():
            name = name.removeprefix("bert.")
            if name.startswith(_IGNORED_PREFIXES) or name.endswith("position_ids"):
                continue
            weights[name] = array
    return weights
