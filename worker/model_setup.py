"""What a worker builds around its model, from its config.

The prefix cache (with its disk tier), speculative decoding, the model's
kind (text, vision or embedding), and which BLAS runs the matrix products (for
the ``Loaded`` report). Called on the scheduler thread while the model
loads (:func:`serves_embeddings` first); nothing here touches the engine.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from shared.config import DRAFT_PREFIX, ModelConfig
from shared.model_kind import ModelKind
from worker.speculation.prompt_lookup import Speculation

if TYPE_CHECKING:  # load MLX; imported where they are used
    from worker.caches.prefix import PrefixCache
    from worker.caches.profile import CacheProfile
    from worker.loading.loader import LoadedModel
    from worker.speculation.draft_model import DraftModel

log = logging.getLogger("mlxd.worker")


def prefix_cache_for(config: ModelConfig, loaded: LoadedModel, trimmable: bool) -> PrefixCache | None:
    """The prefix cache for ``config``'s model ``loaded`` (None when its
    budget is 0), with a disk tier when ``disk_cache_bytes`` is set (its
    writer thread is started here; a directory that cannot be created is
    logged and the tier left out). The disk tier's identity is the weights'
    content hash (:mod:`worker.loading.weights_digest`, memoized next to the tiers),
    dtype and KV settings; the first load of new weights reads them once."""
    from shared.config_values import parse_size
    from shared.paths import state_dir
    from worker.caches.disk import DiskTier
    from worker.caches.prefix import PrefixCache
    from worker.loading.weights_digest import weights_digest

    if config.prefix_cache_bytes <= 0:
        return None
    disk = None
    disk_budget = parse_size(config.disk_cache_bytes, 0)
    if disk_budget > 0:
        directory = Path(config.disk_cache_dir).expanduser() if config.disk_cache_dir else state_dir() / "prefix-cache"
        try:
            weights = weights_digest(loaded.path, directory / "weights-digests.json")
            identity = f"{weights}:{loaded.dtype}|kv_bits={config.kv_bits}|kv_group_size={config.kv_group_size}"
            disk = DiskTier(directory, identity, disk_budget)
            disk.start()
            log.info("prefix cache disk tier at %s (%d entries on disk)", disk.directory, disk.entries)
        except OSError as exc:
            log.warning("prefix cache disk tier disabled: %s", exc)
    return PrefixCache(
        loaded.model_id,
        config.prefix_cache_bytes,
        disk=disk,
        trimmable=trimmable,
        kv_bits=config.kv_bits,
        kv_group_size=config.kv_group_size,
    )


def served_kind(config: ModelConfig) -> ModelKind:
    """The kind of ``config``'s model (config ``kind``, else detected; an
    unresolvable source counts as a text generator, whose loader then
    reports why)."""
    from shared.model_kind import model_kind
    from worker.loading.loader import ModelLoadError, resolve_source

    if config.kind != "auto":
        return model_kind(Path("."), config.kind)
    try:
        return model_kind(resolve_source(config.source))
    except ModelLoadError:
        return "generate"


def serves_embeddings(config: ModelConfig) -> bool:
    """Whether ``config``'s model is an embedding model (see
    :func:`served_kind`)."""
    return served_kind(config) == "embedding"


REPLAYABLE_KINDS = frozenset(("KVCache", "ArraysCache"))
"""Cache classes a speculative step can bring back to the kept tokens
when not every layer can be trimmed: attention layers are trimmed,
recurrent ``ArraysCache`` layers restored and the kept tokens fed again
(:class:`worker.speculation.draft_rollback.ReplayKept`)."""


def speculation_for(config: ModelConfig, profile: CacheProfile, vocab: int = 0) -> Speculation | None:
    """``config``'s :class:`~worker.speculation.prompt_lookup.Speculation` (None when
    ``speculative`` is ``none``, or when it cannot run, with a log line:
    the model's cache (``profile``) cannot be brought back to the accepted
    tokens after a rejected draft (not trimmable and not only attention
    and recurrent layers, or not batchable), or the draft model of
    ``draft:<source>`` does not load, has a vocabulary other than
    ``vocab`` (the target's tokenizer size) or a cache that cannot be
    trimmed). A draft model is loaded here, with the target's ``dtype``
    (call on the scheduler thread: its MLX work runs there)."""
    if config.speculative == "none":
        return None
    replay = not profile.trimmable and profile.kinds.keys() <= REPLAYABLE_KINDS
    if profile.solo or not (profile.trimmable or replay):
        log.warning(
            "model %s: speculative decoding turned off: its cache (%s) cannot be trimmed after a rejected draft",
            config.name,
            ", ".join(sorted(profile.kinds)),
        )
        return None
    draft_model = None
    if config.speculative.startswith(DRAFT_PREFIX):
        draft_model = _draft_model(config, config.speculative[len(DRAFT_PREFIX) :].strip(), vocab)
        if draft_model is None:
            return None
    log.info(
        "model %s: speculative decoding %s (k=%d, ngram=%d, up to %d rows decoding%s)",
        config.name,
        config.speculative,
        config.speculative_tokens,
        config.speculative_ngram,
        config.speculative_max_batch,
        "; recurrent layers restored and kept tokens fed again after each verification" if replay else "",
    )
    return Speculation(
        tokens=config.speculative_tokens,
        ngram=config.speculative_ngram,
        max_batch=config.speculative_max_batch,
        draft_model=draft_model,
    )


def _draft_model(config: ModelConfig, source: str, vocab: int) -> DraftModel | None:
    """The :class:`~worker.speculation.draft_model.DraftModel` of ``source`` for
    ``config``'s model, or None (logged) when it cannot draft for it."""
    from worker.caches.profile import profile_model
    from worker.loading.loader import ModelLoadError, load_model
    from worker.speculation.draft_model import DraftModel

    try:
        loaded = load_model(source, dtype=config.dtype)
    except ModelLoadError as exc:
        log.warning("model %s: speculative decoding turned off: draft model %s: %s", config.name, source, exc)
        return None
    why = None
    if vocab and len(loaded.tokenizer) != vocab:
        why = f"its vocabulary has {len(loaded.tokenizer)} tokens, the model's {vocab}"
    elif not profile_model(loaded.model).trimmable:
        why = "its cache cannot be trimmed after a rejected draft"
    if why:
        log.warning("model %s: speculative decoding turned off: draft model %s: %s", config.name, source, why)
        return None
    return DraftModel(loaded.model, prefill_step=config.prefill_step_size)


def blas_in_use(on_gpu: bool) -> str:
    """Name what runs this worker's matrix products: ``metal`` when MLX's
    default device is the GPU on macOS (``gpu`` elsewhere), ``accelerate``
    for the CPU on macOS, else the BLAS library mapped into this process
    (``openblas`` or ``builtin``)."""
    if on_gpu:
        return "metal" if sys.platform == "darwin" else "gpu"
    if sys.platform == "darwin":
        return "accelerate"
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return "openblas" if "libopenblas" in maps.read() else "builtin"
    except OSError:
        return "unknown"
