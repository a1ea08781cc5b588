"""Convert llama-family GGUF files into mlx-lm model directories.

A GGUF file (llama.cpp's format) holds the weights, the hyper-parameters and
the tokenizer of a model. mlx-lm loads models from a directory with
``config.json``, ``model.safetensors`` and a Hugging Face ``tokenizer.json``.
:func:`worker.loading.gguf_convert.convert_gguf` writes such a directory from a
GGUF file and :func:`worker.loading.gguf_convert.ensure_converted` does it once per
distinct file, in a cache.

What is supported:

* ``general.architecture == "llama"`` (Llama 1/2/3.0, SmolLM, TinyLlama-style
  models), dense only (no experts), no per-dimension RoPE factors.
* Tensors that MLX's GGUF reader returns either as floats (F32, F16, and the
  types MLX dequantizes on load) or as MLX affine-quantized triples
  (``uint32`` weight + ``scales`` + ``biases``, from Q4_0, Q4_1 and Q8_0).
  Quantization may differ per tensor; it is recorded per layer in the
  ``quantization`` section of ``config.json`` as mlx-lm expects.
* Byte-level BPE tokenizers (``tokenizer.ggml.model == "gpt2"``) with the
  pre-tokenizers listed in :data:`worker.loading.gguf_tokenizer.SUPPORTED_PRE_TOKENIZERS`.

llama.cpp's converter permutes the rows of the query and key projections so
that llama.cpp can use interleaved ("GPT-J") RoPE. The converted config
therefore sets ``rope_traditional: true``, which is MLX's name for that RoPE
variant, and the tensors are kept exactly as stored.

This module reads a GGUF file and maps its hyper-parameters and tensors
to mlx-lm's names; :mod:`worker.loading.gguf_tokenizer` rebuilds its tokenizer and
:mod:`worker.loading.gguf_convert` writes the model directory and keeps the
conversion cache.

Everything in these modules is plain file processing plus MLX array I/O on the
calling thread; it holds no global state and is safe to call from several
processes at once (see :func:`worker.loading.gguf_convert.ensure_converted`).
"""

from __future__ import annotations

import collections
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import mlx.core as mx

log = logging.getLogger("worker.gguf")  # the name it had before the move, shared with gguf_convert and gguf_tokenizer

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

TOKEN_TYPE_CONTROL = 3
"""``tokenizer.ggml.token_type`` of a control token."""

TOKEN_TYPE_USER_DEFINED = 4
"""``tokenizer.ggml.token_type`` of a user-defined token."""

# Control tokens that end a turn even when the metadata names another EOS;
# llama.cpp treats the same strings as end-of-generation.
_END_OF_GENERATION_TOKENS = frozenset(
    {"<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<end_of_turn>", "<|end|>", "</s>"}
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
        raise ModelLoadError(f"{path}: cannot read GGUF file: {one_line(exc)}") from exc
    return tensors, metadata


def one_line(exc: BaseException) -> str:
    """``str(exc)`` collapsed onto one line (or the exception's type name)."""
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def meta_value(metadata: Mapping[str, Any], key: str, default: Any = None) -> Any:
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


def require_meta(metadata: Mapping[str, Any], key: str) -> Any:
    """Like :func:`_meta` but the key must exist.

    Raises:
        ModelLoadError: the key is missing.
    """
    value = meta_value(metadata, key)
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
    arch = meta_value(metadata, "general.architecture")
    if arch != "llama":
        raise ModelLoadError(f"GGUF architecture {arch!r} is not supported (only 'llama' can be converted)")
    if (meta_value(metadata, "llama.expert_count") or 0) > 0:
        raise ModelLoadError("mixture-of-experts llama GGUF files are not supported")
    if "rope_freqs.weight" in tensors:
        raise ModelLoadError(
            "GGUF uses per-dimension RoPE factors (rope_freqs, Llama 3.1 style), which this converter does not support"
        )

    hidden = int(require_meta(metadata, "llama.embedding_length"))
    heads = int(require_meta(metadata, "llama.attention.head_count"))
    head_dim = int(meta_value(metadata, "llama.attention.key_length") or hidden // heads)
    rope_dims = int(meta_value(metadata, "llama.rope.dimension_count") or head_dim)
    if rope_dims != head_dim:
        raise ModelLoadError(f"partial RoPE ({rope_dims} of {head_dim} head dims) is not supported")
    embed = tensors.get("token_embd.weight")
    if embed is None:
        raise ModelLoadError("GGUF has no token_embd.weight tensor")

    config: dict[str, Any] = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "intermediate_size": int(require_meta(metadata, "llama.feed_forward_length")),
        "num_hidden_layers": int(require_meta(metadata, "llama.block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(meta_value(metadata, "llama.attention.head_count_kv") or heads),
        "head_dim": head_dim,
        "rms_norm_eps": float(meta_value(metadata, "llama.attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": float(meta_value(metadata, "llama.rope.freq_base", 10000.0)),
        "rope_traditional": True,
        "vocab_size": int(embed.shape[0]),
        "max_position_embeddings": int(meta_value(metadata, "llama.context_length", 4096)),
        "tie_word_embeddings": "output.weight" not in tensors,
        "attention_bias": _has_bias(tensors, ("attn_q", "attn_k", "attn_v", "attn_output")),
        "mlp_bias": _has_bias(tensors, ("ffn_gate", "ffn_up", "ffn_down")),
    }
    if (rope_scaling := _rope_scaling(metadata)) is not None:
        config["rope_scaling"] = rope_scaling
    if (bos := meta_value(metadata, "tokenizer.ggml.bos_token_id")) is not None:
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
    kind = meta_value(metadata, "llama.rope.scaling.type")
    factor = meta_value(metadata, "llama.rope.scaling.factor")
    if kind in (None, "none") or (kind == "linear" and factor in (None, 1.0)):
        return None
    if kind == "linear":
        return {"type": "linear", "factor": float(factor)}
    raise ModelLoadError(f"GGUF RoPE scaling type {kind!r} is not supported (only linear)")


def token_types(metadata: Mapping[str, Any], count: int) -> list[int]:
    """``tokenizer.ggml.token_type`` as a list (all normal when absent)."""
    types = metadata.get("tokenizer.ggml.token_type")
    if types is None:
        return [1] * count
    values = types.tolist() if isinstance(types, mx.array) else list(types)
    if len(values) != count:
        raise ModelLoadError("GGUF tokenizer.ggml.token_type length differs from the token list")
    return values


def end_of_generation_ids(metadata: Mapping[str, Any]) -> list[int]:
    """Token ids that end generation, sorted: EOS, EOT and EOM from the
    metadata plus control tokens whose text is a well-known end-of-turn marker
    (for example ``<|endoftext|>`` and ``<|im_end|>``)."""
    ids = {
        int(value)
        for key in ("eos_token_id", "eot_token_id", "eom_token_id")
        if (value := meta_value(metadata, f"tokenizer.ggml.{key}")) is not None
    }
    tokens = metadata.get("tokenizer.ggml.tokens") or []
    types = token_types(metadata, len(tokens))
    ids.update(
        i
        for i, (text, kind) in enumerate(zip(tokens, types))
        if kind == TOKEN_TYPE_CONTROL and text in _END_OF_GENERATION_TOKENS
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
