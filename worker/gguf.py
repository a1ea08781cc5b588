"""Convert llama-family GGUF files into mlx-lm model directories.

A GGUF file (llama.cpp's format) holds the weights, the hyper-parameters and
the tokenizer of a model. mlx-lm loads models from a directory with
``config.json``, ``model.safetensors`` and a Hugging Face ``tokenizer.json``.
:func:`convert_gguf` writes such a directory from a GGUF file and
:func:`ensure_converted` does it once per distinct file, in a cache.

What is supported:

* ``general.architecture == "llama"`` (Llama 1/2/3.0, SmolLM, TinyLlama-style
  models), dense only (no experts), no per-dimension RoPE factors.
* Tensors that MLX's GGUF reader returns either as floats (F32, F16, and the
  types MLX dequantizes on load) or as MLX affine-quantized triples
  (``uint32`` weight + ``scales`` + ``biases``, from Q4_0, Q4_1 and Q8_0).
  Quantization may differ per tensor; it is recorded per layer in the
  ``quantization`` section of ``config.json`` as mlx-lm expects.
* Byte-level BPE tokenizers (``tokenizer.ggml.model == "gpt2"``) with the
  pre-tokenizers listed in :data:`SUPPORTED_PRE_TOKENIZERS`.

llama.cpp's converter permutes the rows of the query and key projections so
that llama.cpp can use interleaved ("GPT-J") RoPE. The converted config
therefore sets ``rope_traditional: true``, which is MLX's name for that RoPE
variant, and the tensors are kept exactly as stored.

Everything in this module is plain file processing plus MLX array I/O on the
calling thread; it holds no global state and is safe to call from several
processes at once (see :func:`ensure_converted`).
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import mlx.core as mx

log = logging.getLogger(__name__)

CONVERTER_VERSION = 1
"""Bumped whenever the output of :func:`convert_gguf` changes; part of the cache key."""

CONVERSION_MARKER = "mlxd-conversion.json"
"""Written last into a converted directory; a directory without it is incomplete."""

SUPPORTED_PRE_TOKENIZERS = ("default", "gpt2", "gpt-2", "smollm", "llama3", "llama-bpe")
"""Values of ``tokenizer.ggml.pre`` that :func:`build_tokenizer` knows how to reproduce."""

_GLOBAL_TENSORS = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_BLOCK_TENSORS = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_TENSOR_SUFFIXES = ("weight", "bias", "scales", "biases")
_BLOCK_NAME = re.compile(r"blk\.(\d+)\.(\w+)")
_QUANT_BITS = (2, 3, 4, 5, 6, 8)

_TOKEN_TYPE_CONTROL = 3
_TOKEN_TYPE_USER_DEFINED = 4
# Control tokens that end a turn even when the metadata names another EOS;
# llama.cpp treats the same strings as end-of-generation.
_END_OF_GENERATION_TOKENS = frozenset(
    {"<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<end_of_turn>", "<|end|>", "</s>"}
)
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


class ModelLoadError(Exception):
    """A model source cannot be resolved, converted or loaded.

    The message is one line meant for the operator (it names the source and
    what is wrong with it).
    """


# --------------------------------------------------------------------------
# Reading GGUF
# --------------------------------------------------------------------------


def read_gguf(path: Path) -> tuple[dict[str, mx.array], dict[str, Any]]:
    """Return ``(tensors, metadata)`` of the GGUF file at ``path``.

    Tensor shapes are MLX's (row-major, ``[out, in]`` for matrices).
    Metadata values are ``str``, ``list[str]`` or ``mx.array``.

    Raises:
        ModelLoadError: the file cannot be read as GGUF, or it holds a tensor
            type MLX cannot load.
    """
    try:
        tensors, metadata = mx.load(str(path), format="gguf", return_metadata=True)
    except Exception as exc:  # MLX raises RuntimeError/ValueError with C++ text
        raise ModelLoadError(f"{path}: cannot read GGUF file: {_one_line(exc)}") from exc
    return tensors, metadata


def _one_line(exc: BaseException) -> str:
    """``str(exc)`` collapsed onto one line (or the exception's type name)."""
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _meta(metadata: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """A metadata value as a Python scalar (``int``/``float``/``bool``/``str``).

    Raises:
        ModelLoadError: the value exists but is an array rather than a scalar.
    """
    value = metadata.get(key)
    if value is None:
        return default
    if isinstance(value, mx.array):
        if value.ndim != 0:
            raise ModelLoadError(f"GGUF metadata {key!r} is an array, expected a scalar")
        value = value.item()
        if isinstance(value, float):
            value = float(f"{value:.7g}")  # stored as float32: drop the binary noise
    return value


def _require(metadata: Mapping[str, Any], key: str) -> Any:
    """Like :func:`_meta` but the key must exist.

    Raises:
        ModelLoadError: the key is missing.
    """
    value = _meta(metadata, key)
    if value is None:
        raise ModelLoadError(f"GGUF metadata {key!r} is missing")
    return value


# --------------------------------------------------------------------------
# config.json
# --------------------------------------------------------------------------


def build_config(metadata: Mapping[str, Any], tensors: Mapping[str, mx.array]) -> dict[str, Any]:
    """The mlx-lm ``config.json`` content for a llama GGUF, without quantization.

    ``eos_token_id`` lists every end-of-generation token id (see
    :func:`end_of_generation_ids`).

    Raises:
        ModelLoadError: not a llama GGUF, or it uses a feature the mlx-lm
            llama model cannot express (experts, partial or per-dimension
            RoPE, an unsupported RoPE scaling type).
    """
    arch = _meta(metadata, "general.architecture")
    if arch != "llama":
        raise ModelLoadError(f"GGUF architecture {arch!r} is not supported (only 'llama' can be converted)")
    if (_meta(metadata, "llama.expert_count") or 0) > 0:
        raise ModelLoadError("mixture-of-experts llama GGUF files are not supported")
    if "rope_freqs.weight" in tensors:
        raise ModelLoadError(
            "GGUF uses per-dimension RoPE factors (rope_freqs, Llama 3.1 style), which this converter does not support"
        )

    hidden = int(_require(metadata, "llama.embedding_length"))
    heads = int(_require(metadata, "llama.attention.head_count"))
    head_dim = int(_meta(metadata, "llama.attention.key_length") or hidden // heads)
    rope_dims = int(_meta(metadata, "llama.rope.dimension_count") or head_dim)
    if rope_dims != head_dim:
        raise ModelLoadError(f"partial RoPE ({rope_dims} of {head_dim} head dims) is not supported")
    embed = tensors.get("token_embd.weight")
    if embed is None:
        raise ModelLoadError("GGUF has no token_embd.weight tensor")

    config: dict[str, Any] = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "intermediate_size": int(_require(metadata, "llama.feed_forward_length")),
        "num_hidden_layers": int(_require(metadata, "llama.block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(_meta(metadata, "llama.attention.head_count_kv") or heads),
        "head_dim": head_dim,
        "rms_norm_eps": float(_meta(metadata, "llama.attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": float(_meta(metadata, "llama.rope.freq_base", 10000.0)),
        "rope_traditional": True,
        "vocab_size": int(embed.shape[0]),
        "max_position_embeddings": int(_meta(metadata, "llama.context_length", 4096)),
        "tie_word_embeddings": "output.weight" not in tensors,
        "attention_bias": _has_bias(tensors, ("attn_q", "attn_k", "attn_v", "attn_output")),
        "mlp_bias": _has_bias(tensors, ("ffn_gate", "ffn_up", "ffn_down")),
    }
    if (rope_scaling := _rope_scaling(metadata)) is not None:
        config["rope_scaling"] = rope_scaling
    if (bos := _meta(metadata, "tokenizer.ggml.bos_token_id")) is not None:
        config["bos_token_id"] = int(bos)
    if eos_ids := end_of_generation_ids(metadata):
        config["eos_token_id"] = eos_ids
    return config


def _has_bias(tensors: Mapping[str, mx.array], roles: tuple[str, ...]) -> bool:
    """Whether any ``blk.N.<role>.bias`` tensor exists for one of ``roles``."""
    for name in tensors:
        match = _BLOCK_NAME.fullmatch(name.removesuffix(".bias"))
        if name.endswith(".bias") and match is not None and match.group(2) in roles:
            return True
    return False


def _rope_scaling(metadata: Mapping[str, Any]) -> dict[str, Any] | None:
    """mlx-lm ``rope_scaling`` from ``llama.rope.scaling.*`` (``None``: no scaling).

    Raises:
        ModelLoadError: a scaling type other than none/linear.
    """
    kind = _meta(metadata, "llama.rope.scaling.type")
    factor = _meta(metadata, "llama.rope.scaling.factor")
    if kind in (None, "none") or (kind == "linear" and factor in (None, 1.0)):
        return None
    if kind == "linear":
        return {"type": "linear", "factor": float(factor)}
    raise ModelLoadError(f"GGUF RoPE scaling type {kind!r} is not supported (only linear)")


def end_of_generation_ids(metadata: Mapping[str, Any]) -> list[int]:
    """Token ids that end generation, sorted: EOS, EOT and EOM from the
    metadata plus control tokens whose text is a well-known end-of-turn marker
    (for example ``<|endoftext|>`` and ``<|im_end|>``)."""
    ids = {
        int(value)
        for key in ("eos_token_id", "eot_token_id", "eom_token_id")
        if (value := _meta(metadata, f"tokenizer.ggml.{key}")) is not None
    }
    tokens = metadata.get("tokenizer.ggml.tokens") or []
    types = _token_types(metadata, len(tokens))
    ids.update(
        i
        for i, (text, kind) in enumerate(zip(tokens, types))
        if kind == _TOKEN_TYPE_CONTROL and text in _END_OF_GENERATION_TOKENS
    )
    return sorted(ids)


# --------------------------------------------------------------------------
# Tensors
# --------------------------------------------------------------------------


def mlx_tensor_name(gguf_name: str) -> str | None:
    """The mlx-lm llama parameter name for a GGUF tensor name, or ``None``.

    For example ``blk.3.attn_q.scales`` → ``model.layers.3.self_attn.q_proj.scales``.
    """
    base, _, suffix = gguf_name.rpartition(".")
    if suffix not in _TENSOR_SUFFIXES:
        return None
    if base in _GLOBAL_TENSORS:
        return f"{_GLOBAL_TENSORS[base]}.{suffix}"
    match = _BLOCK_NAME.fullmatch(base)
    if match is None or match.group(2) not in _BLOCK_TENSORS:
        return None
    return f"model.layers.{match.group(1)}.{_BLOCK_TENSORS[match.group(2)]}.{suffix}"


def convert_tensors(
    tensors: Mapping[str, mx.array], config: Mapping[str, Any]
) -> tuple[dict[str, mx.array], dict[str, dict[str, Any]]]:
    """Rename GGUF tensors to mlx-lm names and describe their quantization.

    Returns ``(weights, per_layer)`` where ``per_layer`` maps the path of
    every quantized module (e.g. ``model.embed_tokens``) to
    ``{"group_size", "bits", "mode"}``. Tensors are not copied or changed.

    Raises:
        ModelLoadError: an unknown tensor name, a tensor type that is neither
            floating point nor MLX affine-quantized, or inconsistent shapes.
    """
    unknown = sorted(name for name in tensors if mlx_tensor_name(name) is None)
    if unknown:
        shown = ", ".join(unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        raise ModelLoadError(f"GGUF has tensors a llama model does not use: {shown}")
    weights = {mlx_tensor_name(name): array for name, array in tensors.items()}
    per_layer: dict[str, dict[str, Any]] = {}
    for module in sorted({name.rpartition(".")[0] for name in weights}):
        weight = weights.get(f"{module}.weight")
        if weight is None:
            raise ModelLoadError(f"GGUF tensor for {module}.weight is missing")
        if f"{module}.scales" in weights:
            per_layer[module] = _quantization_of(module, weights, config)
        elif not mx.issubdtype(weight.dtype, mx.floating):
            raise ModelLoadError(f"unsupported GGUF tensor type for {module} ({weight.dtype} without scales)")
    return weights, per_layer


def _quantization_of(module: str, weights: Mapping[str, mx.array], config: Mapping[str, Any]) -> dict[str, Any]:
    """``{"group_size", "bits", "mode"}`` of one affine-quantized module.

    The unpacked input width comes from the config, so
    ``weight.shape[-1] * 32 / bits == scales.shape[-1] * group_size == in_dims``.

    Raises:
        ModelLoadError: the tensors do not form a valid MLX affine quantization.
    """
    weight, scales = weights[f"{module}.weight"], weights[f"{module}.scales"]
    in_dims = _input_dims(module, config)
    packed_bits = weight.shape[-1] * 32
    if (
        weight.dtype != mx.uint32
        or f"{module}.biases" not in weights
        or packed_bits % in_dims
        or in_dims % scales.shape[-1]
        or packed_bits // in_dims not in _QUANT_BITS
    ):
        raise ModelLoadError(
            f"unsupported GGUF tensor type for {module}: {weight.dtype}{tuple(weight.shape)} "
            f"with scales{tuple(scales.shape)} for {in_dims} inputs"
        )
    return {"group_size": in_dims // scales.shape[-1], "bits": packed_bits // in_dims, "mode": "affine"}


def _input_dims(module: str, config: Mapping[str, Any]) -> int:
    """Unquantized input width of a llama linear/embedding module."""
    if module.endswith("mlp.down_proj"):
        return int(config["intermediate_size"])
    if module.endswith("self_attn.o_proj"):
        return int(config["num_attention_heads"]) * int(config["head_dim"])
    return int(config["hidden_size"])


def quantization_section(per_layer: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The ``quantization`` value for ``config.json`` (``None`` if nothing is quantized).

    The top-level ``group_size``/``bits``/``mode`` are the most common
    setting; every quantized module is also listed by path, which mlx-lm's
    ``load_model`` class predicate uses in preference to the defaults.
    """
    if not per_layer:
        return None
    counts = collections.Counter((q["group_size"], q["bits"]) for q in per_layer.values())
    (group_size, bits), _ = counts.most_common(1)[0]
    section: dict[str, Any] = {"group_size": group_size, "bits": bits, "mode": "affine"}
    section.update({path: dict(params) for path, params in sorted(per_layer.items())})
    return section


# --------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------


def _token_types(metadata: Mapping[str, Any], count: int) -> list[int]:
    """``tokenizer.ggml.token_type`` as a list (all normal when absent)."""
    types = metadata.get("tokenizer.ggml.token_type")
    if types is None:
        return [1] * count
    values = types.tolist() if isinstance(types, mx.array) else list(types)
    if len(values) != count:
        raise ModelLoadError("GGUF tokenizer.ggml.token_type length differs from the token list")
    return values


def build_tokenizer(metadata: Mapping[str, Any]) -> Any:
    """A ``tokenizers.Tokenizer`` equivalent to the GGUF's byte-level BPE vocabulary.

    Control tokens (type 3) become special added tokens (skipped by
    ``decode(skip_special_tokens=True)``); user-defined tokens (type 4) become
    non-special added tokens, so both are matched atomically in input but
    only the latter are shown in output, as in llama.cpp.

    Raises:
        ModelLoadError: not a ``gpt2`` (byte-level BPE) tokenizer, no merges,
            or an unknown ``tokenizer.ggml.pre``.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models

    kind = _meta(metadata, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise ModelLoadError(f"GGUF tokenizer model {kind!r} is not supported (only byte-level BPE 'gpt2')")
    tokens: list[str] = list(metadata.get("tokenizer.ggml.tokens") or [])
    merges: list[str] = list(metadata.get("tokenizer.ggml.merges") or [])
    if not tokens or not merges:
        raise ModelLoadError("GGUF tokenizer has no tokens or no merges")

    vocab: dict[str, int] = {}
    for index, text in enumerate(tokens):
        vocab.setdefault(text, index)
    pairs = [_merge_pair(merge) for merge in merges]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer = _pre_tokenizer(
        _meta(metadata, "tokenizer.ggml.pre"),
        bool(_meta(metadata, "tokenizer.ggml.add_space_prefix", False)),
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = _post_processor(metadata, tokens)

    types = _token_types(metadata, len(tokens))
    tokenizer.add_special_tokens(
        [
            AddedToken(text, special=True, normalized=False)
            for text, kind_ in zip(tokens, types)
            if kind_ == _TOKEN_TYPE_CONTROL
        ]
    )
    tokenizer.add_tokens(
        [
            AddedToken(text, special=False, normalized=False)
            for text, kind_ in zip(tokens, types)
            if kind_ == _TOKEN_TYPE_USER_DEFINED
        ]
    )
    return tokenizer


def _merge_pair(merge: str) -> tuple[str, str]:
    """``"Ġ t"`` → ``("Ġ", "t")``.

    Raises:
        ModelLoadError: the merge is not two space-separated tokens.
    """
    left, sep, right = merge.partition(" ")
    if not sep or not left or not right or " " in right:
        raise ModelLoadError(f"GGUF tokenizer merge {merge!r} is not two tokens")
    return left, right


def _pre_tokenizer(pre: str | None, add_prefix_space: bool) -> Any:
    """The Hugging Face pre-tokenizer matching llama.cpp's ``tokenizer.ggml.pre``.

    ``None`` (older files) means llama.cpp's default, the GPT-2 split.

    Raises:
        ModelLoadError: ``pre`` is not in :data:`SUPPORTED_PRE_TOKENIZERS`.
    """
    from tokenizers import Regex, pre_tokenizers

    if pre is None:
        log.warning("GGUF has no tokenizer.ggml.pre; using the GPT-2 pre-tokenizer")
        pre = "default"
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=True)
    if pre in ("default", "gpt2", "gpt-2"):
        return byte_level
    if pre == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if pre in ("llama3", "llama-bpe"):
        split = pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated", invert=False)
        raw_bytes = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=False)
        return pre_tokenizers.Sequence([split, raw_bytes])
    raise ModelLoadError(f"GGUF pre-tokenizer {pre!r} is not supported (known: {', '.join(SUPPORTED_PRE_TOKENIZERS)})")


def _post_processor(metadata: Mapping[str, Any], tokens: list[str]) -> Any:
    """Adds BOS/EOS around encodings when the metadata asks for it."""
    from tokenizers import processors

    add_bos, add_eos = _add_bos_eos(metadata)
    special: list[tuple[str, int]] = []
    single = "$A"
    if add_bos:
        bos = tokens[int(_require(metadata, "tokenizer.ggml.bos_token_id"))]
        special.append((bos, tokens.index(bos)))
        single = f"{bos} {single}"
    if add_eos:
        eos = tokens[int(_require(metadata, "tokenizer.ggml.eos_token_id"))]
        special.append((eos, tokens.index(eos)))
        single = f"{single} {eos}"
    if not special:
        return processors.ByteLevel(trim_offsets=False)
    pair = f"{single} {single.replace('$A', '$B:1')}"
    return processors.TemplateProcessing(single=single, pair=pair, special_tokens=special)


def _add_bos_eos(metadata: Mapping[str, Any]) -> tuple[bool, bool]:
    """``(add_bos_token, add_eos_token)`` from the metadata (llama.cpp's BPE defaults: False)."""
    return (
        bool(_meta(metadata, "tokenizer.ggml.add_bos_token", False)),
        bool(_meta(metadata, "tokenizer.ggml.add_eos_token", False)),
    )


def build_tokenizer_config(metadata: Mapping[str, Any], context_length: int) -> dict[str, Any]:
    """``tokenizer_config.json``: class, special tokens, BOS/EOS policy, chat template."""
    tokens: list[str] = list(metadata.get("tokenizer.ggml.tokens") or [])
    add_bos, add_eos = _add_bos_eos(metadata)
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": add_bos,
        "add_eos_token": add_eos,
        "clean_up_tokenization_spaces": False,
        "model_max_length": context_length,
    }
    for role, key in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding")):
        token_id = _meta(metadata, f"tokenizer.ggml.{key}_token_id")
        if token_id is not None and 0 <= int(token_id) < len(tokens):
            config[f"{role}_token"] = tokens[int(token_id)]
    if (template := _meta(metadata, "tokenizer.chat_template")) is not None:
        config["chat_template"] = template
    return config


# --------------------------------------------------------------------------
# Conversion
# --------------------------------------------------------------------------


def convert_gguf(gguf_path: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> Path:
    """Write an mlx-lm model directory for the GGUF file at ``gguf_path``.

    ``out_dir`` is created if needed; existing files with the same names are
    overwritten. The files are ``config.json``, ``generation_config.json``,
    ``model.safetensors`` (quantized tensors kept as they are),
    ``tokenizer.json``, ``tokenizer_config.json`` and, last,
    :data:`CONVERSION_MARKER`. The result is checked by building the
    mlx-lm model from it. No caching: see :func:`ensure_converted`.

    Raises:
        ModelLoadError: the file is unreadable, not a supported llama GGUF,
            or the converted directory does not load in mlx-lm.
    """
    started = time.perf_counter()
    source, out = Path(gguf_path), Path(out_dir)
    tensors, metadata = read_gguf(source)
    try:
        config = build_config(metadata, tensors)
        weights, per_layer = convert_tensors(tensors, config)
        if (quantization := quantization_section(per_layer)) is not None:
            config["quantization"] = quantization
            config["quantization_config"] = quantization
        tokenizer = build_tokenizer(metadata)
        tokenizer_config = build_tokenizer_config(metadata, config["max_position_embeddings"])
    except ModelLoadError as exc:
        raise ModelLoadError(f"{source}: {exc}") from None

    out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    tokenizer.save(str(out / "tokenizer.json"))
    _write_json(out / "tokenizer_config.json", tokenizer_config)
    _write_json(out / "config.json", config)
    _write_json(out / "generation_config.json", _generation_config(config))
    _verify_loadable(out, source)
    _write_json(
        out / CONVERSION_MARKER,
        {
            "converter_version": CONVERTER_VERSION,
            "source": str(source),
            "seconds": round(time.perf_counter() - started, 3),
        },
    )
    _fsync_tree(out)
    return out


def _generation_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """``generation_config.json``: BOS/EOS ids only (sampling is the server's business)."""
    return {key: config[key] for key in ("bos_token_id", "eos_token_id") if key in config}


def _verify_loadable(model_dir: Path, source: Path) -> None:
    """Build the mlx-lm model from ``model_dir`` and bind its weights (lazily).

    Raises:
        ModelLoadError: mlx-lm rejects the config or a weight name/shape.
    """
    from mlx_lm.utils import load_model

    try:
        load_model(model_dir, lazy=True, strict=True)
    except Exception as exc:
        raise ModelLoadError(f"{source}: converted model does not load in mlx-lm: {_one_line(exc)}") from exc


def _write_json(path: Path, content: Any) -> None:
    """Write ``content`` as indented UTF-8 JSON."""
    path.write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _fsync_tree(directory: Path) -> None:
    """Flush every file in ``directory`` and the directory itself to disk."""
    for entry in directory.iterdir():
        with open(entry, "rb") as handle:
            os.fsync(handle.fileno())
    _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    """Flush a directory's entries (renames) to disk; best effort."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# --------------------------------------------------------------------------
# Cache
# --------------------------------------------------------------------------


def default_cache_root() -> Path:
    """Where converted models live unless a ``cache_root`` is given.

    ``$MLXD_CACHE_DIR`` if set; otherwise ``~/Library/Caches/mlxd/models``
    on macOS and ``${XDG_CACHE_HOME:-~/.cache}/mlxd/models`` elsewhere.
    """
    if configured := os.environ.get("MLXD_CACHE_DIR"):
        return Path(configured).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "mlxd" / "models"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "mlxd" / "models"


def source_sha256(path: Path, cache_root: Path) -> str:
    """SHA-256 (hex) of the file at ``path``, remembered across calls.

    The digest is kept in ``<cache_root>/source-hashes.json`` keyed by the
    resolved path, size and mtime, so an unchanged file is hashed once.
    Concurrent callers may both hash; the remembered result is the same.
    """
    stat = path.stat()
    index_path = cache_root / "source-hashes.json"
    index = _read_json(index_path)
    entry = index.get(str(path))
    fresh = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    if isinstance(entry, dict) and all(entry.get(k) == v for k, v in fresh.items()):
        return str(entry["sha256"])
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(4 << 20):
            digest.update(chunk)
    index = {key: value for key, value in _read_json(index_path).items() if Path(key).exists()}
    index[str(path)] = {**fresh, "sha256": digest.hexdigest()}
    with contextlib.suppress(OSError):  # remembering is an optimisation only
        _atomic_write_json(index_path, index)
    return digest.hexdigest()


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; ``{}`` if missing or unreadable."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _atomic_write_json(path: Path, content: Any) -> None:
    """Replace ``path`` with ``content`` via a temporary file and rename."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(content, handle, indent=1)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def is_converted(model_dir: Path) -> bool:
    """Whether ``model_dir`` is a complete conversion by this converter version."""
    marker = _read_json(model_dir / CONVERSION_MARKER)
    return marker.get("converter_version") == CONVERTER_VERSION and (model_dir / "model.safetensors").is_file()


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if needed) for the block."""
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def ensure_converted(gguf_path: str | os.PathLike[str], cache_root: str | os.PathLike[str] | None = None) -> Path:
    """The converted mlx-lm directory for a GGUF file, converting it at most once.

    The directory is ``<cache_root>/<first 32 hex of the file's SHA-256>-v<N>``
    (``N`` = :data:`CONVERTER_VERSION`); ``cache_root`` defaults to
    :func:`default_cache_root`. A conversion is written into a temporary
    directory next to it and renamed into place only when complete, under an
    exclusive file lock per key: a crash never leaves a directory that looks
    complete, and concurrent callers (threads or processes) convert once and
    all get the same directory. Leftovers of crashed conversions are removed.

    Raises:
        ModelLoadError: ``gguf_path`` is not a readable file, or the
            conversion fails (see :func:`convert_gguf`).
    """
    source = Path(gguf_path).expanduser().resolve()
    if not source.is_file():
        raise ModelLoadError(f"GGUF file not found: {source}")
    root = Path(cache_root).expanduser() if cache_root is not None else default_cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        key = f"{source_sha256(source, root)[:32]}-v{CONVERTER_VERSION}"
    except OSError as exc:
        raise ModelLoadError(f"cannot use model cache {root}: {_one_line(exc)}") from exc
    final = root / key
    if is_converted(final):
        return final
    with _exclusive_lock(root / f".{key}.lock"):
        if is_converted(final):
            return final
        _remove_leftovers(root, key)
        log.info("converting %s into %s", source, final)
        started = time.perf_counter()
        staging = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=root))
        try:
            convert_gguf(source, staging)
            staging.chmod(0o755)
            os.rename(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        _fsync_dir(root)
        log.info("converted %s in %.1fs", source.name, time.perf_counter() - started)
    return final


def _remove_leftovers(root: Path, key: str) -> None:
    """Delete staging directories of ``key`` and an incomplete final directory.

    Only called with the key's lock held, so no live converter owns them.
    """
    for leftover in root.glob(f".tmp-{key}-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    final = root / key
    if final.exists():
        shutil.rmtree(final, ignore_errors=True)
