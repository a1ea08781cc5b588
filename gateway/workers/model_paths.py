"""Where a configured model source lives on disk, as far as the gateway
can tell without loading it: for the memory estimate, for the
``models_root`` confinement check and for the model's kind. No MLX, no
network. Every function here touches the disk: the gateway calls them off
its event loop (see :mod:`gateway.workers.model_files`)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

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
    return weight_bytes(located(source))


def located(source: str) -> Path | None:
    """Where ``source``'s files are here: its local path, else its
    Hugging Face snapshot in the local cache (None: neither)."""
    return local_path(source) or cached_snapshot(source)


def weight_bytes(path: Path | None) -> int | None:
    """Bytes of the weight files at ``path`` (a weight file, or a directory
    whose top-level weight files count), or None when there are none."""
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
