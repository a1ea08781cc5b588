"""Writing an mlx-lm model directory from a GGUF file, once per file.

:func:`convert_gguf` writes the directory (config, weights, tokenizer; see
:mod:`worker.loading.gguf` for what is supported) and checks that mlx-lm loads it;
:func:`ensure_converted` does it at most once per distinct file, in a cache
directory shared safely by concurrent threads and processes (an exclusive
file lock per key, atomic renames). Runs on the calling thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import mlx.core as mx

from worker.loading.gguf import (
    ModelLoadError,
    build_config,
    convert_tensors,
    one_line,
    quantization_section,
    read_gguf,
)
from worker.loading.gguf_tokenizer import build_tokenizer, build_tokenizer_config

log = logging.getLogger("worker.loading.gguf")

CONVERTER_VERSION = 1
"""Bumped whenever the output of :func:`convert_gguf` changes; part of the cache key."""

CONVERSION_MARKER = "mlxd-conversion.json"
"""Written last into a converted directory; a directory without it is incomplete."""


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
        raise ModelLoadError(f"{source}: converted model does not load in mlx-lm: {one_line(exc)}") from exc


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
        raise ModelLoadError(f"cannot use model cache {root}: {one_line(exc)}") from exc
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
