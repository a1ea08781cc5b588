"""What the gateway reads from a configured model's files, in one blocking
call to run off the event loop.

:func:`read_model_files` locates a model source (a local path, a
``package:`` file or a Hugging Face snapshot in the local cache; never the
network), sizes its weights, detects its kind and reads the small files the
listings show (``config.json``, the chat template, a speech model's voices). Everything here touches
the disk, so the gateway calls it through :func:`asyncio.to_thread` only:
the pool when it starts, on a config reload and before each worker start
(:mod:`gateway.workers.pool`), and the listings on every call
(:meth:`gateway.workers.pool.WorkerPool.model_files`), so none of them sees
stale files. The facts are a :class:`gateway.core.backend.ModelFiles`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gateway.core.backend import ModelFiles
from gateway.workers.model_paths import located, source_kind, weight_bytes
from shared.config import ModelConfig


def read_model_files(source: str, configured_kind: str = "auto") -> ModelFiles:
    """Read what the gateway needs from ``source``'s files (blocking: call
    it off the event loop). Never raises for missing or unreadable files;
    their facts are then unknown."""
    path = located(source)
    directory = path if path is not None and path.is_dir() else None
    return ModelFiles(
        kind=source_kind(source, configured_kind),
        weight_bytes=weight_bytes(path),
        config=_json_file(directory, "config.json"),
        chat_template=_chat_template(directory),
        voices=_voices(directory),
    )


def _voices(directory: Path | None) -> tuple[str, ...]:
    """The voice pack names of a speech model directory (``voices/*.safetensors``), sorted."""
    if directory is None:
        return ()
    try:
        return tuple(sorted(p.stem for p in (directory / "voices").glob("*.safetensors")))
    except OSError:
        return ()


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


def read_models_files(models: list[ModelConfig]) -> dict[str, ModelFiles]:
    """:func:`read_model_files` of each of ``models``, by model name
    (blocking: call it off the event loop)."""
    return {m.name: read_model_files(m.source, m.kind) for m in models}
