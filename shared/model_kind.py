"""What kind of model a directory holds: a text generator, a
vision-language generator (takes images) or an embedding model.

Both the gateway (to refuse a request for the wrong kind of model before
starting its worker) and the worker (to pick its engine) ask here. Only
small files are read (``modules.json``, ``config.json``); nothing is
imported, so the gateway can call it without MLX.

Rules, first match wins:

1. the config's ``kind`` when it is not ``auto``;
2. a file (a GGUF) is a generator;
3. a sentence-transformers layout (``modules.json`` naming a ``Pooling``
   module, or a ``1_Pooling`` directory) is an embedding model;
4. ``config.json`` whose ``model_type`` is an encoder-only family
   (:data:`ENCODER_TYPES`, e.g. ``bert``) is an embedding model: such
   models cannot generate text;
5. ``config.json`` whose ``model_type`` is a text-to-speech family
   (:data:`SPEECH_TYPES`, e.g. ``kokoro``) is a speech model;
6. ``config.json`` with a ``vision_config`` object (as every mlx-vlm image
   model's has) is a vision model (``vision``: a generator that also takes
   images);
7. anything else is a (text) generator.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

ModelKind = Literal["generate", "vision", "embedding", "speech"]
"""``generate``: chat, completions, responses, messages. ``vision``: the
same, and the requests may carry images. ``embedding``:
``/v1/embeddings``. ``speech``: ``/v1/audio/speech`` (text to speech)."""

KINDS: tuple[ModelKind, ...] = ("generate", "vision", "embedding", "speech")
"""Every kind, for validating a configured ``kind``."""

ENCODER_TYPES = frozenset({"bert", "roberta", "xlm-roberta", "distilbert", "modernbert", "nomic_bert", "new"})
"""``model_type`` values of encoder-only families (embedding models)."""

SPEECH_TYPES = frozenset({"kokoro"})
"""``model_type`` values of text-to-speech families the ``speech`` worker runs."""

REQUEST_KINDS: dict[str, tuple[ModelKind, ...]] = {
    "generate": ("generate", "vision"),
    "embed": ("embedding",),
    "speech": ("speech",),
}
"""The kinds of model that serve each wire request (by its msgspec tag:
``generate``, ``embed``, ``speech``)."""

_REQUEST_ENDPOINTS = {
    "generate": "chat, completions, responses or messages",
    "embed": "/v1/embeddings",
    "speech": "/v1/audio/speech",
}

_SMALL_FILE = 1 << 20


def detect_kind(path: Path) -> ModelKind:
    """The kind of the model at ``path`` (a file or a model directory) by
    rules 2-7 of the module docstring. Never raises: unreadable or
    malformed metadata counts as absent."""
    if not path.is_dir():
        return "generate"
    if (path / "1_Pooling").is_dir() or _names_pooling(path / "modules.json"):
        return "embedding"
    config = _read_json(path / "config.json")
    if isinstance(config, dict) and str(config.get("model_type", "")).lower() in ENCODER_TYPES:
        return "embedding"
    if isinstance(config, dict) and str(config.get("model_type", "")).lower() in SPEECH_TYPES:
        return "speech"
    if isinstance(config, dict) and isinstance(config.get("vision_config"), dict):
        return "vision"
    return "generate"


def model_kind(path: Path, configured: str = "auto") -> ModelKind:
    """``configured`` unless it is ``auto``; else :func:`detect_kind`."""
    if configured in KINDS:
        return configured  # type: ignore[return-value]
    return detect_kind(path)


def _names_pooling(path: Path) -> bool:
    """Whether a sentence-transformers ``modules.json`` lists a pooling module."""
    modules = _read_json(path)
    if not isinstance(modules, list):
        return False
    return any(isinstance(m, dict) and str(m.get("type", "")).endswith(".Pooling") for m in modules)


def _read_json(path: Path) -> object:
    """The JSON in a small file, or None when it is missing, large or invalid."""
    try:
        if not path.is_file() or path.stat().st_size > _SMALL_FILE:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def has_vision_tower(path: Path) -> bool:
    """Whether the model directory at ``path`` is a vision-language model:
    its ``config.json`` has a ``vision_config`` object (as every mlx-vlm
    image model's does). Reads one small file; never raises (unreadable
    metadata counts as no vision tower)."""
    return detect_kind(path) == "vision"


def wrong_kind_message(model: str, kind: ModelKind) -> str:
    """The client-facing refusal of a request for the other kind of model
    (``kind`` is the model's own), used by the gateway and the worker alike."""
    if kind == "embedding":
        return (
            f"model '{model}' is an embedding model (kind 'embedding'): it serves only POST /v1/embeddings, "
            "not chat, completions, responses or messages"
        )
    return (
        f"model '{model}' is a generation model (kind '{kind}'): it does not serve /v1/embeddings; "
        "use an embedding model"
    )


def no_vision_message(model: str | None) -> str:
    """The client-facing refusal of an image sent to a model that takes
    none (used by the gateway and the worker alike; ``model`` None: the
    worker, which says "this model")."""
    name = "this model" if model is None else f"model '{model}'"
    return f"{name} has no vision support: it cannot read images (send text only, or use a vision model)"


def serves_request(kind: ModelKind, tag: str) -> bool:
    """Whether a model of ``kind`` serves a wire request tagged ``tag``
    (see :data:`REQUEST_KINDS`; an unknown tag is served by no kind)."""
    return kind in REQUEST_KINDS.get(tag, ())


def wrong_request_message(model: str, kind: ModelKind, tag: str) -> str:
    """The client-facing refusal of a request (wire tag ``tag``) sent to a
    model of another ``kind``, naming both kinds and where the model serves."""
    wanted = " or ".join(f"'{k}'" for k in REQUEST_KINDS.get(tag, ()))
    serves = next((endpoint for t, endpoint in _REQUEST_ENDPOINTS.items() if kind in REQUEST_KINDS[t]), "nothing")
    asked = _REQUEST_ENDPOINTS.get(tag, tag)
    noun = {"generate": "generation", "vision": "vision-language generation"}.get(kind, kind)
    return (
        f"model '{model}' is a {noun} model (kind '{kind}'): it serves {serves}, not {asked}, "
        f"which needs a model of kind {wanted}"
    )
