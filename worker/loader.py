"""Find a model from a source string and load it with mlx-lm.

A *source* (``[[models]].source`` in the config) is one of:

* a path to a ``.gguf`` file (converted once, see :mod:`worker.gguf_convert`);
* a local mlx-lm model directory (one with ``config.json``);
* a Hugging Face repo id ``org/name`` that is already in the local Hugging
  Face cache (the network is never used);
* ``package:<python package>/<relative path>``: a file or directory shipped
  inside an installed Python package, found without importing the package.

:func:`resolve_source` turns a source into a local directory and
:func:`load_model` loads it, optionally dequantizing for the CPU backend.
Every failure is a :class:`ModelLoadError` with a one-line message.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_map_with_path

from worker.gguf import ModelLoadError
from worker.gguf_convert import ensure_converted
from worker.model_fixes import apply_model_fixes
from worker.weights_digest import identity_files

__all__ = ["DTYPES", "LoadedModel", "ModelLoadError", "load_model", "resolve_source"]

DTYPES = ("auto", "quantized", "float32", "float16", "bfloat16")
"""Accepted values of ``load_model(dtype=...)``."""

DEFAULT_CONTEXT_LENGTH = 4096
"""Context length assumed when the model config states none."""

_PACKAGE_PREFIX = "package:"
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_FLOAT_DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}
_CONTEXT_KEYS = ("max_position_embeddings", "max_sequence_length", "n_positions", "seq_length", "n_ctx")


@dataclass
class LoadedModel:
    """A loaded model and what the worker needs to know about it.

    ``model``: the mlx-lm ``nn.Module`` (parameters already evaluated).
    ``tokenizer``: mlx-lm's ``TokenizerWrapper``.
    ``path``: the resolved local model directory.
    ``context_length``: the model's maximum positions (config), else
    :data:`DEFAULT_CONTEXT_LENGTH`.
    ``eos_token_ids``: every token id that ends generation.
    ``model_id``: a stable identity of these weights in this dtype (the
    directory, a fingerprint of its files and the effective dtype); equal
    strings mean interchangeable models, so it can key caches of model state.
    ``dtype``: the effective weight dtype: ``quantized``, ``float32``,
    ``float16`` or ``bfloat16``.
    ``config``: the model's ``config.json`` as mlx-lm read it.
    """

    model: nn.Module
    tokenizer: Any
    path: Path
    context_length: int
    eos_token_ids: set[int]
    model_id: str
    dtype: str = "quantized"
    config: dict[str, Any] = field(default_factory=dict, repr=False)


# --------------------------------------------------------------------------
# Resolving sources
# --------------------------------------------------------------------------


def resolve_source(source: str) -> Path:
    """The local mlx-lm model directory for ``source`` (see the module docstring).

    A ``.gguf`` file (directly or inside a package) is converted into the
    model cache on first use, which can take a few seconds; a directory
    holding exactly one ``.gguf`` file and no ``config.json`` counts as that
    file. ``~`` is expanded. Never touches the network.

    Raises:
        ModelLoadError: nothing matches, or the match is not a usable model
            (the message names the source and why).
    """
    text = source.strip()
    if not text:
        raise ModelLoadError("model source is empty")
    if text.startswith(_PACKAGE_PREFIX):
        return _resolve_path(_package_path(text), source)
    path = Path(text).expanduser()
    if path.exists():
        return _resolve_path(path, source)
    if _REPO_ID.fullmatch(text) and not text.startswith((".", "~")):
        return _resolve_path(_cached_repo(text), source)
    raise ModelLoadError(
        f"model source {source!r}: no such file or directory (and not a package: source or a Hugging Face repo id)"
    )


def _resolve_path(path: Path, source: str) -> Path:
    """A model directory from an existing path: a GGUF file or an mlx-lm directory.

    Raises:
        ModelLoadError: ``path`` is neither.
    """
    path = path.resolve()
    if path.is_file():
        if not _is_gguf(path):
            raise ModelLoadError(f"model source {source!r}: {path} is not a GGUF file")
        return ensure_converted(path)
    if (path / "config.json").is_file():
        return path
    ggufs = sorted(path.glob("*.gguf")) if path.is_dir() else []
    if len(ggufs) == 1:
        return ensure_converted(ggufs[0])
    raise ModelLoadError(
        f"model source {source!r}: {path} has no config.json"
        + (f" and {len(ggufs)} .gguf files (name one)" if ggufs else "")
    )


def _is_gguf(path: Path) -> bool:
    """Whether the file starts with the GGUF magic bytes."""
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"GGUF"
    except OSError:
        return False


def _package_path(source: str) -> Path:
    """The path that ``package:<pkg>/<relative>`` names, without importing ``<pkg>``.

    ``<pkg>`` may be dotted (``a.b``); only its directories are searched,
    via ``importlib.util.find_spec`` of the top-level name (which does not
    execute it) and then plain sub-directories.

    Raises:
        ModelLoadError: malformed source, package not installed, or the
            relative path does not exist in it.
    """
    spec = source[len(_PACKAGE_PREFIX) :]
    package, _, relative = spec.partition("/")
    if not package or not relative:
        raise ModelLoadError(f"model source {source!r}: expected package:<package>/<path inside it>")
    roots = _package_dirs(package)
    for root in roots:
        candidate = root / relative
        if candidate.exists():
            return candidate
    if not roots:
        raise ModelLoadError(f"model source {source!r}: Python package {package!r} is not installed")
    raise ModelLoadError(f"model source {source!r}: {relative!r} not found in package {package!r}")


def _package_dirs(package: str) -> list[Path]:
    """Directories of an installed (possibly dotted or namespace) package; ``[]`` if none."""
    top, *rest = package.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        roots = [Path(location) for location in spec.submodule_search_locations]
    else:
        roots = [Path(entry or ".") / top for entry in sys.path]
    return [root.joinpath(*rest) for root in roots if root.joinpath(*rest).is_dir()]


def _cached_repo(repo_id: str) -> Path:
    """The local snapshot of a Hugging Face repo, from the cache only.

    Raises:
        ModelLoadError: the repo is not in the local Hugging Face cache.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception as exc:  # LocalEntryNotFoundError, incomplete snapshots, bad ids
        reason = "" if isinstance(exc, LocalEntryNotFoundError) else f" ({one_line(exc)})"
        raise ModelLoadError(
            f"model source {repo_id!r}: not a local path and not in the local Hugging Face "
            f"cache{reason}; mlxd never downloads, fetch it first (e.g. `hf download {repo_id}`)"
        ) from exc


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------


def load_model(source: str, *, dtype: str = "auto") -> LoadedModel:
    """Resolve ``source``, load it with mlx-lm and prepare its weights.

    ``dtype``:

    * ``"auto"``: on a Metal device keep the weights as stored; on the CPU
      backend dequantize quantized layers and cast floating weights to
      float32 (MLX's CPU quantized and half-precision matmuls are slow).
    * ``"quantized"``: keep the weights as stored.
    * ``"float32"``, ``"float16"``, ``"bfloat16"``: dequantize every
      ``QuantizedLinear``/``QuantizedEmbedding`` and cast all floating
      parameters to that type. Tied embeddings keep working because the
      replacement ``nn.Embedding`` has ``as_linear``.

    Custom model code is never executed (``trust_remote_code=False``). All
    parameters are evaluated before returning. Layers mlx-lm is known to
    batch wrongly are corrected first (:mod:`worker.model_fixes`).

    Thread note: call this on the thread that will run the model. MLX
    streams are per thread, and the arrays created here belong to this
    thread's default stream.

    Raises:
        ModelLoadError: bad ``dtype``, unresolvable source, or mlx-lm cannot
            load the model.
    """
    if dtype not in DTYPES:
        raise ModelLoadError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    path = resolve_source(source)
    try:
        from mlx_lm.utils import load as mlx_lm_load

        model, tokenizer, config = mlx_lm_load(str(path), lazy=True, return_config=True, trust_remote_code=False)
    except Exception as exc:  # ValueError, FileNotFoundError, OSError, JSON errors, ...
        raise ModelLoadError(f"model source {source!r}: mlx-lm cannot load {path}: {one_line(exc)}") from exc

    effective = cast_weights(model, dtype)
    apply_model_fixes(model)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        path=path,
        context_length=context_length_of(config),
        eos_token_ids={int(token) for token in tokenizer.eos_token_ids},
        model_id=f"{path}#{directory_fingerprint(path)}:{effective}",
        dtype=effective,
        config=config,
    )


def cast_weights(model: nn.Module, dtype: str) -> str:
    """Bring ``model``'s weights to ``dtype`` (see :func:`load_model`),
    evaluate them, and return the effective dtype's name."""
    effective = _target_dtype(dtype)
    if effective != "quantized":
        dequantize_model(model, _FLOAT_DTYPES[effective])
    mx.eval(model.parameters())
    if effective == "quantized" and not _is_quantized(model):
        effective = _dominant_dtype(model)
    return effective


def one_line(exc: BaseException) -> str:
    """``str(exc)`` collapsed onto one line (or the exception's type name)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _target_dtype(dtype: str) -> str:
    """``dtype`` with ``auto`` decided for the current backend."""
    if dtype != "auto":
        return dtype
    return "quantized" if mx.metal.is_available() else "float32"


def dequantize_model(model: nn.Module, dtype: mx.Dtype) -> None:
    """Replace quantized layers of ``model`` by float ones, in place, lazily.

    Every ``nn.QuantizedLinear`` becomes an ``nn.Linear`` and every
    ``nn.QuantizedEmbedding`` an ``nn.Embedding`` (whose ``as_linear``
    serves tied output heads), using each layer's own group size, bits and
    mode; then all floating parameters are cast to ``dtype``. Other
    quantized layer types (e.g. mixture-of-experts switch layers) are left
    quantized. The new arrays are not evaluated.
    """

    def replace(_path: str, module: nn.Module) -> nn.Module:
        if isinstance(module, nn.QuantizedLinear):
            return _float_linear(module, dtype)
        if isinstance(module, nn.QuantizedEmbedding):
            return _float_embedding(module, dtype)
        return module

    leaves = tree_map_with_path(replace, model.leaf_modules(), is_leaf=nn.Module.is_module)
    model.update_modules(leaves)
    model.set_dtype(dtype)


def _dequantized_weight(module: nn.Module, dtype: mx.Dtype) -> mx.array:
    """The float weight matrix of a quantized linear or embedding layer.

    Affine 2/4/8-bit weights are unpacked with plain array ops in float32
    (``scale * q + bias``, as llama.cpp does): on the CPU backend that is
    about ten times faster than ``mx.dequantize`` and does not round through
    the scales' float16. Other layouts use ``mx.dequantize``.
    """
    if module.mode == "affine" and module.bits in (2, 4, 8) and "biases" in module:
        return _unpack_affine(module.weight, module.scales, module.biases, module.group_size, module.bits).astype(dtype)
    return mx.dequantize(
        module.weight,
        module.scales,
        module.get("biases"),
        group_size=module.group_size,
        bits=module.bits,
        mode=module.mode,
        global_scale=module.get("global_scale"),
        dtype=dtype,
    )


def _unpack_affine(packed: mx.array, scales: mx.array, biases: mx.array, group_size: int, bits: int) -> mx.array:
    """Float32 ``scales * q + biases`` for MLX's little-endian packed ``uint32`` weights."""
    shifts = mx.arange(0, 32, bits, dtype=mx.uint32)
    values = (packed[..., None] >> shifts) & ((1 << bits) - 1)
    rows = packed.shape[0]
    groups = values.reshape(rows, -1, group_size).astype(mx.float32)
    scaled = groups * scales.astype(mx.float32)[..., None] + biases.astype(mx.float32)[..., None]
    return scaled.reshape(rows, -1)


def _float_linear(module: nn.QuantizedLinear, dtype: mx.Dtype) -> nn.Linear:
    """An ``nn.Linear`` equal to ``module`` (same bias presence)."""
    weight = _dequantized_weight(module, dtype)
    has_bias = "bias" in module
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=has_bias)
    linear.weight = weight
    if has_bias:
        linear.bias = module.bias.astype(dtype)
    return linear


def _float_embedding(module: nn.QuantizedEmbedding, dtype: mx.Dtype) -> nn.Embedding:
    """An ``nn.Embedding`` equal to ``module``."""
    weight = _dequantized_weight(module, dtype)
    embedding = nn.Embedding(weight.shape[0], weight.shape[1])
    embedding.weight = weight
    return embedding


def _is_quantized(model: nn.Module) -> bool:
    """Whether any leaf module of ``model`` is quantized."""
    return any(isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding)) for _, module in model.named_modules())


def _dominant_dtype(model: nn.Module) -> str:
    """Name of the floating dtype holding most parameters (``"float32"`` if none)."""
    from mlx.utils import tree_flatten

    sizes: dict[str, int] = {}
    for _, array in tree_flatten(model.parameters()):
        if mx.issubdtype(array.dtype, mx.floating):
            name = str(array.dtype).rpartition(".")[2]
            sizes[name] = sizes.get(name, 0) + array.size
    return max(sizes, key=sizes.__getitem__) if sizes else "float32"


def context_length_of(config: dict[str, Any]) -> int:
    """The maximum positions stated by a model config (top level or
    ``text_config``), else :data:`DEFAULT_CONTEXT_LENGTH`."""
    for scope in (config, config.get("text_config") or {}):
        for key in _CONTEXT_KEYS:
            value = scope.get(key)
            if isinstance(value, int) and value > 0:
                return value
    return DEFAULT_CONTEXT_LENGTH


def directory_fingerprint(path: Path) -> str:
    """16 hex digits that change when a model directory's files change.

    Hashes the names, sizes and modification times of the config,
    tokenizer and weight files (not their contents, so it is instant): the
    in-memory prefix cache's key. Identities that must survive a restart
    hash the contents (:func:`worker.weights_digest.weights_digest`).
    """
    digest = hashlib.sha256()
    for file in identity_files(path):
        stat = file.stat()
        digest.update(f"{file.name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]
