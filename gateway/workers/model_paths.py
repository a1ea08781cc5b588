"""Where a configured model source lives on disk, as far as the gateway
can tell without loading it: for the memory estimate, for the
``models_root`` confinement check and for the model's kind. No MLX, no
network. Also what a model's files say for listings
(:func:`model_files`, behind :meth:`gateway.core.backend.ModelBackend.model_files`)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

from gateway.core.backend import ModelFiles
from shared.model_kind import ModelKind, model_kind


class SourceOutsideRoot(ValueError):
    """A local model source resolves outside the configured models root."""


def local_path(source: str) -> Path | None:
    """The file or directory a source names, or None for a Hugging Face
    repo id. ``package:<pkg>/<file>`` is located without importing the
    package."""
    if source.startswith("package:"):
        package, _, rel = source[len("package:") :].partition("/")
        spec = importlib.util.find_spec(package.split(".")[0]) if package else None
        if spec is None or not spec.submodule_search_locations:
            return None
        base = Path(next(iter(spec.submodule_search_locations)))
        for part in package.split(".")[1:]:
            base = base / part
        return base / rel
    path = Path(source).expanduser()
    if path.is_absolute() or source.startswith((".", "~")) or path.exists():
        return path
    return None


def check_inside_root(source: str, root: str) -> None:
    """Raise unless ``source`` (a local path) resolves inside ``root``.

    ``..`` components and symbolic links are resolved first, so neither can
    escape. Repo ids and package sources are not paths and pass.

    Raises:
        SourceOutsideRoot: the resolved path is not under ``root``.
    """
    if not root or source.startswith("package:"):
        return
    path = local_path(source)
    if path is None:
        return
    real_root = Path(os.path.realpath(Path(root).expanduser()))
    real = Path(os.path.realpath(path))
    if real != real_root and real_root not in real.parents:
        raise SourceOutsideRoot(f"model source {source!r} resolves outside models_root {root!r}")


WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".npz")
"""File name endings counted as model weights."""


def source_bytes(source: str) -> int | None:
    """Bytes of weight files a source holds, or None when unknown.

    A Hugging Face repo id is sized from its snapshot in the local cache
    (the same snapshot the worker loads; never the network).
    """
    path = local_path(source)
    if path is None:
        path = cached_snapshot(source)
    if path is None or not path.exists():
        return None
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.glob("*") if p.suffix in WEIGHT_SUFFIXES) or None


def source_kind(source: str, configured: str = "auto") -> ModelKind | None:
    """The kind of model a source holds (see :mod:`shared.model_kind`):
    ``configured`` unless ``auto``, else detected from a local source;
    None for a source that is not on disk here (a Hugging Face repo id)."""
    if configured != "auto":
        return model_kind(Path("."), configured)
    path = local_path(source)
    if path is None or not path.exists():
        return None
    return model_kind(path)


def cached_snapshot(repo_id: str) -> Path | None:
    """The local Hugging Face cache snapshot of ``repo_id``
    (``org/name[@revision]``, honouring ``HF_HOME`` / ``HF_HUB_CACHE``)
    that may be served (:func:`shared.hub_snapshots.local_snapshot`), or
    None when there is none or it is not a repo id. Looks only at the
    local cache."""
    from shared.hub_snapshots import SnapshotUnavailable, local_snapshot

    repo, _, revision = repo_id.partition("@")
    if repo.count("/") != 1 or repo.startswith((".", "~", "/")):
        return None
    try:
        return local_snapshot(repo, revision or "main")
    except (SnapshotUnavailable, ValueError):  # not cached, not servable, or not a valid repo id
        return None


def model_files(source: str) -> ModelFiles:
    """What the files of ``source`` say: its size on disk, its
    ``config.json`` and its chat template (each empty when unknown: a repo
    id outside the local cache, a single file)."""
    directory = _model_dir(source)
    return ModelFiles(
        size_bytes=source_bytes(source) or 0,
        config=_json_file(directory, "config.json"),
        chat_template=_chat_template(directory),
    )


def _model_dir(source: str) -> Path | None:
    """The local directory of a model's files (None: unknown or a single
    file)."""
    path = local_path(source) or cached_snapshot(source)
    return path if path is not None and path.is_dir() else None


def _json_file(directory: Path | None, name: str) -> dict[str, Any]:
    """A small JSON file of a model directory as a dict (``{}`` when
    missing or unreadable)."""
    if directory is None:
        return {}
    try:
        value = json.loads((directory / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _chat_template(directory: Path | None) -> str:
    """The model's chat template text (``""`` when unknown)."""
    template = _json_file(directory, "tokenizer_config.json").get("chat_template")
    if isinstance(template, str):
        return template
    if directory is not None:
        try:
            return (directory / "chat_template.jinja").read_text(encoding="utf-8")
        except OSError:
            pass
    return ""
