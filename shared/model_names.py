"""Ollama's tag rule for model names: the one place every protocol's
routes (through :meth:`gateway.workers.pool.WorkerPool.resolve`), the
Ollama listings and the hub's catalog names apply it.

A model name may end in a tag (``qwen3:4b``); a name without one means
``:latest``, so ``X`` and ``X:latest`` name the same model. A colon before
a ``/`` belongs to a host's port (``host:8080/m``), not a tag. Pure string
functions, no side effects.
"""

from __future__ import annotations

from collections.abc import Collection


def tag_of(name: str) -> str:
    """``name``'s tag (``"4b"`` for ``qwen3:4b``), ``""`` when it has none
    (also for ``host:8080/m``, whose colon is a port's)."""
    base, colon, tag = name.rpartition(":")
    return tag if colon and base and tag and "/" not in tag else ""


def listed_name(name: str) -> str:
    """``name`` as Ollama lists it: with its tag, ``:latest`` when it has
    none (``tiny`` -> ``tiny:latest``; ``qwen3:4b`` stays)."""
    return name if tag_of(name) else f"{name}:latest"


def latest_twin(name: str) -> str | None:
    """The other spelling of ``name`` under the rule that an untagged name
    means ``:latest``: ``X:latest`` -> ``X``, ``X`` -> ``X:latest``; None
    for a name with another tag (``X:4b`` is only ``X:4b``) and for two
    tags (``X:4b:latest`` names nothing, as in Ollama)."""
    tag = tag_of(name)
    if not tag:
        return f"{name}:latest"
    base = name[: -len(":latest")]
    return base if tag == "latest" and not tag_of(base) else None


def find_name(name: str, known: Collection[str]) -> str | None:
    """The name among ``known`` (configured or catalog names) that ``name``
    names: ``name`` itself, else its :func:`latest_twin`; None if neither
    is there."""
    if name in known:
        return name
    twin = latest_twin(name)
    return twin if twin is not None and twin in known else None
