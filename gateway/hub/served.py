"""How hub models become ``[[models]]`` entries the gateway serves.

Three ways, one rule each:

- :func:`expand_sources`: a configured ``source`` that is a catalog name
  (``qwen3:4b``) becomes its ``org/name@revision`` (the worker knows no
  catalog), and the entry's ``kind``, ``tool_parser`` and
  ``reasoning_parser`` left at ``auto`` take the catalog's values;
- :func:`models_for_names`: ``mlxd serve --model NAME ...`` builds one
  entry per name with default settings, loaded at start;
- :func:`with_pulled_models`: with ``server.allow_model_management``,
  every model mlxd pulled completely and no entry uses yet is served under
  its catalog name (else its repo id), loaded on first use and unloaded
  after :data:`PULLED_TTL` idle, as Ollama does with pulled models. The
  names it added last (:func:`pulled_names`; the gateway runs one config
  at a time) let ``DELETE /api/delete`` tell them from entries of the
  config file.

:func:`pull_target` says whether an entry's source still has to be pulled.
Pure functions of the config, the catalog and the local cache; no network.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from gateway.hub.catalog import CatalogEntry, CatalogError, Target, load_catalog
from gateway.hub.store import hub_source, list_local
from shared.config import Config, ModelConfig
from shared.hub_snapshots import SnapshotUnavailable, local_snapshot
from shared.model_names import find_name

PULLED_TTL = "5m"
"""Idle time after which a pulled model that only ``allow_model_management``
serves is unloaded (Ollama's default keep-alive)."""

_pulled: frozenset[str] = frozenset()


def catalog_of(config: Config) -> dict[str, CatalogEntry]:
    """The catalog ``config`` names (the shipped one plus its user file).

    Raises:
        CatalogError: the user file is invalid or missing.
    """
    return load_catalog(config.server.catalog_file)


def _apply_entry(model: ModelConfig, target: Target) -> ModelConfig:
    """``model`` with the catalog entry's kind and parsers where it says ``auto``."""
    entry = target.entry
    if entry is None:
        return model
    changes: dict[str, str] = {}
    if model.kind == "auto" and entry.kind in ("generate", "vision", "embedding"):
        changes["kind"] = entry.kind
    if model.tool_parser == "auto" and entry.tool_parser != "auto":
        changes["tool_parser"] = entry.tool_parser
    if model.reasoning_parser == "auto" and entry.reasoning_parser != "auto":
        changes["reasoning_parser"] = entry.reasoning_parser
    return msgspec.structs.replace(model, **changes) if changes else model


def expand_sources(config: Config, catalog: dict[str, CatalogEntry]) -> Config:
    """``config`` with catalog-name sources replaced by ``org/name@revision``
    (and ``draft:`` sources likewise); a second pass changes nothing.

    Raises:
        CatalogError: an entry's catalog name is a ``transcription`` model
            (the catalog's are mlx-examples Whisper exports, without the
            tokenizer files mlxd's transcription worker needs).
    """
    models = []
    for model in config.models:
        target = hub_source(model.source, catalog)
        if target is not None and target.entry is not None:
            if target.entry.kind == "transcription":
                raise CatalogError(
                    f"model {model.name!r}: {target.name} is an mlx-examples Whisper export (no tokenizer files), which mlxd cannot serve by catalog name; serve a Whisper model directory (docs/api/audio.md)"
                )
            model = _apply_entry(msgspec.structs.replace(model, source=_source_of(target)), target)
        if model.speculative.startswith("draft:"):
            draft = hub_source(model.speculative[len("draft:") :], catalog)
            if draft is not None and draft.entry is not None:
                model = msgspec.structs.replace(model, speculative="draft:" + _source_of(draft))
        models.append(model)
    return msgspec.structs.replace(config, models=models)


def _source_of(target: Target) -> str:
    """``org/name`` or ``org/name@revision`` for a target."""
    return str(target.ref)


def model_name(target: Target) -> str:
    """The served name of a target: its catalog name, else its repo id
    (a revision is not part of a name)."""
    return target.name or target.ref.repo_id


def models_for_names(targets: list[Target]) -> list[ModelConfig]:
    """``[[models]]`` entries for ``mlxd serve --model``: one per target,
    default settings, loaded at start.

    Raises:
        CatalogError: a transcription model, or two targets with one name.
    """
    models: list[ModelConfig] = []
    for target in targets:
        if target.entry is not None and target.entry.kind == "transcription":
            raise CatalogError(
                f"{target.name} is an mlx-examples Whisper export (no tokenizer files), which mlxd cannot serve by catalog name; serve a Whisper model directory (docs/api/audio.md)"
            )
        name = model_name(target)
        if any(m.name == name for m in models):
            raise CatalogError(f"--model {name} is given twice")
        models.append(_apply_entry(ModelConfig(name=name, source=_source_of(target), preload=True), target))
    return models


def pull_target(model: ModelConfig, catalog: dict[str, CatalogEntry]) -> Target | None:
    """The hub target ``model`` still needs pulled before its worker can
    load it: its source names a repo (or catalog name) with no servable
    local snapshot. None for local sources and models already there."""
    target = hub_source(model.source, catalog)
    if target is None or model.node:
        return None
    try:
        local_snapshot(target.ref.repo_id, target.ref.revision)
    except SnapshotUnavailable:
        return target
    return None


def with_pulled_models(config: Config, catalog: dict[str, CatalogEntry], cache_dir: Path | None = None) -> Config:
    """``config`` plus an entry for every completely pulled model that no
    entry uses and whose name (or its ``:latest`` twin,
    :func:`shared.model_names.find_name`) no entry has (see the module
    docstring); unchanged unless
    ``server.allow_model_management``."""
    global _pulled
    if not config.server.allow_model_management:
        _pulled = frozenset()
        return config
    sources = {m.name: m.source for m in config.models}
    taken = {name for m in config.models for name in (m.name, *m.aliases)}
    added: list[ModelConfig] = []
    for local in list_local(sources, catalog, cache_dir):
        if local.state != "complete" or local.used_by or not local.refs:
            continue
        ref = "main" if "main" in local.refs else local.refs[0]
        source = local.repo_id if ref == "main" else f"{local.repo_id}@{ref}"
        names = [n for n in local.names if catalog[n].repo == local.repo_id and catalog[n].revision == ref]
        name = names[0] if names else local.repo_id
        if find_name(name, taken) is not None:  # taken by that name or its :latest twin
            continue
        taken.add(name)
        target = Target(
            hub_source(source, catalog).ref, names[0] if names else "", catalog.get(names[0]) if names else None
        )
        added.append(_apply_entry(ModelConfig(name=name, source=source, ttl=PULLED_TTL), target))
    _pulled = frozenset(m.name for m in added)
    return msgspec.structs.replace(config, models=[*config.models, *added])


def pulled_names() -> frozenset[str]:
    """The names the latest :func:`with_pulled_models` call added (the
    models served only because they were pulled)."""
    return _pulled
