"""What kind of model a directory holds: a text generator, a
vision-language generator (takes images), an embedding model, a
reranker (cross-encoder), a text-to-speech model (``speech``) or a
speech-to-text model (``transcription``).

Both the gateway (to refuse a request for the wrong kind of model before
starting its worker) and the worker (to pick its engine) ask here. Only
small files are read (``modules.json``, ``config.json``); nothing is
imported, so the gateway can call it without MLX.

Rules, first match wins:

1. the config's ``kind`` when it is not ``auto``;
2. a file (a GGUF) is a generator;
3. a sentence-transformers layout (``modules.json`` naming a ``Pooling``
   module, or a ``1_Pooling`` directory) is an embedding model;
3a. ``config.json`` whose ``architectures`` name a
   ``*ForSequenceClassification`` class (what cross-encoder checkpoints
   ship) is a reranker (``rerank``);
4. ``config.json`` whose ``model_type`` is an encoder-only family
   (:data:`ENCODER_TYPES`, e.g. ``bert``) is an embedding model: such
   models cannot generate text;
4a. ``config.json`` whose ``model_type`` is a text-to-speech family
   (:data:`SPEECH_TYPES`, e.g. ``kokoro``) is a speech model (``speech``);
4b. ``config.json`` whose ``model_type`` is ``whisper`` is a
   speech-to-text model (``transcription``);
5. ``config.json`` with a ``vision_config`` object (as every mlx-vlm image
   model's has), at its top or in its ``thinker_config`` (Qwen-Omni), is a
   vision model (``vision``: a generator that also takes images or audio);
6. anything else is a (text) generator.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

ModelKind = Literal["generate", "vision", "embedding", "rerank", "speech", "transcription"]
"""``generate``: chat, completions, responses, messages. ``vision``: the
same, and the requests may carry images. ``embedding``:
``/v1/embeddings``. ``rerank``: ``/v1/rerank``. ``speech``:
``/v1/audio/speech`` (text to speech). ``transcription``:
``/v1/audio/transcriptions`` and ``/v1/audio/translations``."""

KINDS: tuple[ModelKind, ...] = ("generate", "vision", "embedding", "rerank", "speech", "transcription")
"""Every kind, for validating a configured ``kind``."""

ENCODER_TYPES = frozenset({"bert", "roberta", "xlm-roberta", "distilbert", "modernbert", "nomic_bert", "new"})
"""``model_type`` values of encoder-only families (embedding models)."""

SPEECH_TYPES = frozenset({"kokoro"})
"""``model_type`` values of text-to-speech families the ``speech`` worker runs."""

_SMALL_FILE = 1 << 20


def detect_kind(path: Path) -> ModelKind:
    """The kind of the model at ``path`` (a file or a model directory) by
    rules 2-6 of the module docstring. Never raises: unreadable or
    malformed metadata counts as absent."""
    if not path.is_dir():
        return "generate"
    if (path / "1_Pooling").is_dir() or _names_pooling(path / "modules.json"):
        return "embedding"
    config = _read_json(path / "config.json")
    if isinstance(config, dict) and _classifies_sequences(config):
        return "rerank"
    if isinstance(config, dict) and str(config.get("model_type", "")).lower() in ENCODER_TYPES:
        return "embedding"
    if isinstance(config, dict) and str(config.get("model_type", "")).lower() in SPEECH_TYPES:
        return "speech"
    if isinstance(config, dict) and str(config.get("model_type", "")).lower() == "whisper":
        return "transcription"
    if isinstance(config, dict) and _has_vision_config(config):
        return "vision"
    return "generate"


def _has_vision_config(config: dict) -> bool:
    """Whether ``config`` has a ``vision_config`` object, at its top or in
    its ``thinker_config`` object."""
    thinker = config.get("thinker_config")
    return isinstance(config.get("vision_config"), dict) or (
        isinstance(thinker, dict) and isinstance(thinker.get("vision_config"), dict)
    )


def model_kind(path: Path, configured: str = "auto") -> ModelKind:
    """``configured`` unless it is ``auto``; else :func:`detect_kind`."""
    if configured in KINDS:
        return configured  # type: ignore[return-value]
    return detect_kind(path)


def _classifies_sequences(config: dict) -> bool:
    """Whether a ``config.json`` names a ``*ForSequenceClassification`` architecture."""
    names = config.get("architectures")
    return isinstance(names, list) and any(str(n).endswith("ForSequenceClassification") for n in names)


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


KIND_SERVES: dict[str, str] = {
    "generate": "chat, completions, responses and messages",
    "vision": "chat, completions, responses and messages (with images)",
    "embedding": "POST /v1/embeddings",
    "rerank": "POST /v1/rerank",
    "speech": "POST /v1/audio/speech",
    "transcription": "POST /v1/audio/transcriptions and /v1/audio/translations",
}
"""What a model of each kind serves, for refusals and the model lists."""

KIND_CAPABILITIES: dict[str, tuple[str, ...]] = {
    "generate": ("completion",),
    "vision": ("completion", "vision"),
    "embedding": ("embedding",),
    "rerank": ("rerank",),
    "speech": ("speech",),
    "transcription": ("transcription",),
}
"""The capabilities each kind has at least (Ollama's names; a generator's
template may add ``tools`` and ``thinking``)."""


def capabilities(kind: str | None, chat_template: str = "", thinking: bool = False) -> list[str]:
    """What a model of ``kind`` can do, in Ollama's capability names: the
    kind's own (:data:`KIND_CAPABILITIES`), and for a generator ``tools``
    when its ``chat_template`` mentions them and ``thinking`` when
    ``thinking`` says it has reasoning markup (the gateway's rule:
    :meth:`gateway.workers.pool.WorkerPool.thinks`), both before
    ``vision``. Empty when the kind is not known."""
    if kind not in KIND_CAPABILITIES:
        return []
    found = list(KIND_CAPABILITIES[kind])
    if kind in ("generate", "vision"):
        found[1:1] = [name for name, has in (("tools", "tools" in chat_template), ("thinking", thinking)) if has]
    return found


def serves(kind: str, needed: str) -> bool:
    """Whether a model of ``kind`` serves a request that needs ``needed``
    (``generate``, ``embedding``, ``rerank``, ``speech`` or ``transcription``; a vision model generates)."""
    return kind in ("generate", "vision") if needed == "generate" else kind == needed


def wrong_kind_message(model: str, kind: str, needed: str | None = None) -> str:
    """The client-facing refusal of a request for another kind of model,
    naming both kinds: ``kind`` is the model's own, ``needed`` the kind the
    request needs (None: the other of generation and embedding). Used by
    the gateway and the worker alike."""
    if needed is None:
        needed = "generate" if kind == "embedding" else "embedding"
    noun = {
        "generate": "a generation",
        "vision": "a generation",
        "embedding": "an embedding",
        "rerank": "a rerank",
        "speech": "a speech",
        "transcription": "a transcription",
    }
    offered = KIND_SERVES.get(kind, kind)
    return (
        f"model '{model}' is {noun.get(kind, 'a')} model (kind '{kind}'): it serves only {offered}; "
        f"this request needs a model of kind '{needed}' ({KIND_SERVES.get(needed, needed)})"
    )


def no_vision_message(model: str | None) -> str:
    """The client-facing refusal of an image sent to a model that takes
    none (used by the gateway and the worker alike; ``model`` None: the
    worker, which says "this model")."""
    name = "this model" if model is None else f"model '{model}'"
    return f"{name} has no vision support: it cannot read images (send text only, or use a vision model)"


def cannot_read_message(model: str | None, kind: str | None, what: str, needs: str, family: str = "") -> str:
    """The client-facing refusal of a media part a model cannot take:
    ``what`` (e.g. ``videos``) sent to ``model`` (None: "this model") of
    ``kind`` (None: not known) and mlx-vlm ``family`` (the worker knows
    it); ``needs`` says which models take it."""
    name = "this model" if model is None else f"model '{model}'"
    of_kind = f" (kind '{kind}'{f', family {family}' if family else ''})" if kind else ""
    return f"{name}{of_kind} cannot read {what}: {needs}"


VIDEO_MODELS = "videos are read by vision models of the Qwen-VL families (kind 'vision')"
"""Which models take ``video_url`` parts (for refusals)."""

AUDIO_MODELS = "audio is read by vision models of the Gemma 4 (with an audio tower), Gemma 3n and Qwen3-Omni families (kind 'vision')"
"""Which models take ``input_audio`` parts (for refusals)."""
