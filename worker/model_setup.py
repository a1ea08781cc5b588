"""What a worker builds around its model, from its config: the worker's composition.

:func:`build_generation` loads a text or vision model (sharded over a
tensor-parallel group when there is one) and builds what serves it: the
detokenizer, the prompt builder (chat template, tool and reasoning formats,
grammar compiler, image preparer), the cache profile, the prefix cache
(with its disk tier), speculative decoding and the scheduler;
:func:`build_embedding` loads an embedding model and its scheduler,
:func:`build_rerank` a reranker (cross-encoder) and its scheduler,
:func:`build_speech` a text-to-speech model and its scheduler,
:func:`build_transcription` a Whisper model and its round scheduler. Each
gives a setup (:class:`GenerationSetup`, else a :class:`KindSetup`) whose
``report`` is the ``Loaded`` message. Also the model's kind (text, vision, embedding, rerank or
transcription) and which BLAS
runs the matrix products.

Called on the scheduler thread while the model loads (:func:`served_kind`
first), so every MLX object is created there; the modules that load MLX are
imported inside the functions for the same reason (this module is imported
by :mod:`worker.main` on the main thread).
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from shared.config import DRAFT_PREFIX, ModelConfig
from shared.model_kind import ModelKind
from shared.protocol import Loaded, SamplingDefaults
from worker.engine import mlx_memory
from worker.engine.scheduler import Scheduler
from worker.engine.step_plan import PlanLink
from worker.messages import OutputPace
from worker.output.detok import TokenDecoder
from worker.prompting.builder import PromptBuilder
from worker.speculation.controller import DraftController
from worker.speculation.drafting import SUFFIX_ORDERS, Speculation
from worker.speculation.suffix_index import TokenIndex

if TYPE_CHECKING:  # load MLX; imported where they are used
    from worker.caches.prefix import PrefixCache
    from worker.caches.profile import CacheProfile
    from worker.loading.loader import LoadedModel
    from worker.speculation.draft_model import DraftModel

log = logging.getLogger("mlxd.worker")


@dataclass(frozen=True)
class GenerationSetup:
    """A text or vision model and what serves it (see :func:`build_generation`)."""

    loaded: LoadedModel
    context: int
    decoder: TokenDecoder
    prompts: PromptBuilder
    scheduler: Scheduler
    sampling_defaults: SamplingDefaults
    host_sampling: bool
    vision: bool

    def report(self, worker_id: str, load_seconds: float) -> Loaded:
        """The ``Loaded`` message announcing this model (memory read now)."""
        import mlx.core as mx

        memory = mlx_memory.sample()
        return Loaded(
            worker_id=worker_id,
            context_length=self.context,
            load_seconds=load_seconds,
            model_path=str(self.loaded.path),
            blas=blas_in_use(on_gpu=mx.default_device() == mx.gpu),
            sampling="host" if self.host_sampling else "device",
            sampling_defaults=self.sampling_defaults,
            active_memory_bytes=memory.active,
            cache_memory_bytes=memory.cache,
            peak_memory_bytes=memory.peak,
            working_set_bytes=mlx_memory.working_set_bytes(),
            memory_limit_bytes=mlx_memory.memory_limit(),
            vision=self.vision,
            speculation=self.scheduler.speculation.method if self.scheduler.speculation is not None else "",
            reasoning=self.prompts.formats.reasoning_format or "",
        )


def build_generation(
    config: ModelConfig, emit: Callable[[Any], None], lockstep: Any = None, pace: OutputPace | None = None
) -> GenerationSetup:
    """Scheduler thread: load ``config``'s text or vision model, shard it over
    ``lockstep``'s group (a :class:`~worker.tensor_parallel.lockstep.Lockstep`;
    None: one process) and build what serves it; the scheduler reports its
    items to ``emit`` and keeps within ``pace`` of the output thread (None:
    it never waits for it).

    Raises:
        Exception: whatever loading the model raises (the caller reports it
        as ``Failed``).
    """
    from worker.caches.profile import profile_model
    from worker.engine.batch_engine import default_host_sampling
    from worker.loading.loader import load_model
    from worker.prompting.model_formats import model_formats
    from worker.sampling.constrained_decoding import GrammarCompiler
    from worker.sampling.defaults import model_sampling_defaults

    vision = served_kind(config) == "vision"
    images = None
    if vision:
        from shared.config_values import parse_size
        from worker.loading.loader import ModelLoadError
        from worker.vision.audio import AudioLimits
        from worker.vision.inputs import ImagePreparer
        from worker.vision.markup import UnsupportedProcessor
        from worker.vision.model import load_vision_model
        from worker.vision.video import VideoLimits

        loaded, processor = load_vision_model(config.source, dtype=config.dtype)
        text_vocab = (loaded.config.get("text_config") or {}).get("vocab_size", 0)
        videos = VideoLimits(
            max_videos=config.video_max_count,
            max_bytes=parse_size(config.video_max_bytes, 0),
            max_seconds=config.video_max_seconds,
            max_frames=config.video_max_frames,
            fps=config.video_fps,
        )
        try:
            images = ImagePreparer(
                processor,
                max(len(loaded.tokenizer), int(text_vocab or 0)),
                model_type=str(loaded.config.get("model_type", "")),
                video_limits=videos,
                audio_limits=AudioLimits(max_seconds=config.audio_max_seconds),
                template=loaded.tokenizer,
            )
        except UnsupportedProcessor as exc:
            raise ModelLoadError(f"model source {config.source!r} cannot be served: {exc}") from None
    else:
        loaded = load_model(config.source, dtype=config.dtype)
    if lockstep is not None:
        from worker.tensor_parallel.lockstep import shard_model

        shard_model(loaded.model, lockstep.group, config.name)
    total, in_layers = weight_bytes(loaded.model)
    log.info(
        "model %s rank %d holds %d bytes of weights (%d in its decoder layers)",
        config.name,
        lockstep.group.rank() if lockstep is not None else 0,
        total,
        in_layers,
    )
    sampling_defaults = model_sampling_defaults(loaded.path, config.sampling_defaults)
    context = loaded.context_length
    if config.context_length:
        context = min(context, config.context_length)
    vocab = len(loaded.tokenizer)
    cache_profile = profile_model(loaded.model)
    log.info("model %s %s", config.name, cache_profile.describe())
    if cache_profile.solo:
        log.warning(
            "model %s: mlx-lm cannot batch its cache (%s); serving one sequence at a time",
            config.name,
            cache_profile.unbatchable,
        )
    prompts = PromptBuilder(
        loaded.tokenizer,
        context_length=context,
        default_max_tokens=config.default_max_tokens,
        max_tool_calls_per_turn=config.max_tool_calls_per_turn,
        sampling_defaults=sampling_defaults,
        message_boundaries=not cache_profile.trimmable and config.prefix_cache_bytes > 0,
        vocab_size=vocab,
        formats=model_formats(loaded.tokenizer, config.tool_parser, config.reasoning_parser),
        grammars=GrammarCompiler(
            getattr(loaded.tokenizer, "_tokenizer", loaded.tokenizer), min(loaded.eos_token_ids), vocab
        ),
        images=images,
    )
    host_sampling = default_host_sampling()
    link: PlanLink | None = lockstep
    kv_bits = live_kv_bits(config, loaded.model, vision=vision, grouped=lockstep is not None)
    scheduler = Scheduler(
        loaded.model,
        set(loaded.eos_token_ids),
        emit,
        cache=prefix_cache_for(config, loaded, cache_profile.trimmable, live_quantized=kv_bits > 0),
        max_batch_size=config.max_batch_size,
        prefill_batch_size=config.prefill_batch_size,
        prefill_step_size=config.prefill_step_size,
        host_sampling=host_sampling,
        checkpoints=not cache_profile.trimmable,
        speculation=None if vision else speculation_for(config, cache_profile, vocab, grouped=lockstep is not None),
        solo=cache_profile.solo,
        lockstep=link,
        pace=pace,
        kv_budget=kv_budget_for(config, total),
        kv_bits=kv_bits,
        kv_group_size=config.kv_group_size,
    )
    return GenerationSetup(
        loaded=loaded,
        context=context,
        decoder=TokenDecoder(loaded.tokenizer, loaded.path),
        prompts=prompts,
        scheduler=scheduler,
        sampling_defaults=sampling_defaults,
        host_sampling=host_sampling,
        vision=vision,
    )


@dataclass(frozen=True)
class KindSetup:
    """A model of a kind other than text generation (``embedding``,
    ``rerank``, ``speech``, ``transcription``) and its scheduler, built by
    that kind's ``build_*`` function; ``context`` is the most the model
    takes at once (tokens; phonemes per chunk for speech)."""

    kind: ModelKind
    model: Any
    scheduler: Any
    context: int

    def report(self, worker_id: str, load_seconds: float) -> Loaded:
        """The ``Loaded`` message announcing this model (memory read now)."""
        import mlx.core as mx

        memory = mlx_memory.sample()
        return Loaded(
            worker_id=worker_id,
            context_length=self.context,
            load_seconds=load_seconds,
            model_path=str(self.model.path),
            blas=blas_in_use(on_gpu=mx.default_device() == mx.gpu),
            sampling="none",
            active_memory_bytes=memory.active,
            cache_memory_bytes=memory.cache,
            peak_memory_bytes=memory.peak,
            working_set_bytes=mlx_memory.working_set_bytes(),
            memory_limit_bytes=mlx_memory.memory_limit(),
        )


def build_embedding(config: ModelConfig, emit: Callable[[Any], None]) -> KindSetup:
    """Scheduler thread: load ``config``'s embedding model and its scheduler,
    which reports to ``emit``.

    Raises:
        Exception: whatever loading the model raises.
    """
    from worker.embeddings.model import load_embedding_model
    from worker.embeddings.scheduler import EmbeddingScheduler

    model = load_embedding_model(config.source, dtype=config.dtype, context_length=config.context_length)
    scheduler = EmbeddingScheduler(model, emit, max_batch_size=config.max_batch_size, sample_memory=mlx_memory.record)
    return KindSetup("embedding", model, scheduler, model.max_tokens)


def build_rerank(config: ModelConfig, emit: Callable[[Any], None]) -> KindSetup:
    """Scheduler thread: load ``config``'s reranker (cross-encoder) and its
    scheduler, which reports to ``emit``.

    Raises:
        Exception: whatever loading the model raises.
    """
    from worker.rerank.model import load_rerank_model
    from worker.rerank.scheduler import RerankScheduler

    model = load_rerank_model(config.source, dtype=config.dtype, context_length=config.context_length)
    return KindSetup(
        "rerank",
        model,
        RerankScheduler(model, emit, max_batch_size=config.max_batch_size, sample_memory=mlx_memory.record),
        model.max_tokens,
    )


def build_speech(config: ModelConfig, emit: Callable[[Any], None]) -> KindSetup:
    """Scheduler thread: load ``config``'s text-to-speech model and its
    scheduler, which reports to ``emit`` (context: the most phonemes one
    chunk may hold).

    Raises:
        Exception: whatever loading the model raises.
    """
    from worker.speech.model import load_speech_model
    from worker.speech.scheduler import SpeechScheduler

    model = load_speech_model(config.source)
    return KindSetup("speech", model, SpeechScheduler(model, emit, sample_memory=mlx_memory.record), model.max_phonemes)


def build_transcription(config: ModelConfig, emit: Callable[[Any], None]) -> KindSetup:
    """Scheduler thread: load ``config``'s Whisper model and its round
    scheduler, which reports to ``emit`` (context: Whisper's text context
    in tokens).

    Raises:
        Exception: whatever loading the model raises.
    """
    from worker.transcription.model import load_whisper
    from worker.transcription.scheduler import TranscriptionScheduler

    model = load_whisper(config.source, dtype=config.dtype)
    scheduler = TranscriptionScheduler(
        model, emit, max_batch_size=config.max_batch_size, sample_memory=mlx_memory.record
    )
    return KindSetup("transcription", model, scheduler, model.model.dims.n_text_ctx)


KIND_BUILDERS: dict[str, Callable[[ModelConfig, Callable[[Any], None]], KindSetup]] = {
    "embedding": build_embedding,
    "rerank": build_rerank,
    "speech": build_speech,
    "transcription": build_transcription,
}
"""The builder of each kind other than text generation (``generate`` and
``vision`` are :func:`build_generation`'s)."""


def prefix_cache_for(
    config: ModelConfig, loaded: LoadedModel, trimmable: bool, live_quantized: bool = False
) -> PrefixCache | None:
    """The prefix cache for ``config``'s model ``loaded`` (None when its
    budget is 0; ``live_quantized``: the running sequences keep quantized
    KV, so quantized entries are handed out as stored, see
    :func:`live_kv_bits`), with a disk tier when ``disk_cache_bytes`` is set (its
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
        live_quantized=live_quantized,
    )


def live_kv_bits(config: ModelConfig, model: Any, *, vision: bool = False, grouped: bool = False) -> int:
    """Scheduler thread: the bits the running sequences' KV of ``config``'s
    ``model`` is kept in (``kv_bits``; 0: full precision). Falls back to
    full precision, logged as a warning, for a vision model (``vision``), a
    tensor-parallel group (``grouped``) and any model
    :func:`~worker.caches.quantized_batch.why_not_quantized` rejects
    (attention sinks, multi-head latent attention, a head size
    ``kv_group_size`` does not divide); the prefix cache then still keeps
    its entries quantized and hands them out dequantized."""
    from worker.caches.quantized_batch import why_not_quantized

    if not config.kv_bits:
        return 0
    if vision:
        reason = "a vision model (its prefill runs outside the batch engine's caches)"
    elif grouped:
        reason = "a tensor-parallel group"
    else:
        reason = why_not_quantized(model, config.kv_bits, config.kv_group_size)
    if reason is not None:
        log.warning(
            "model %s: kv_bits = %d applies to prefix-cache entries only; running sequences keep full-precision KV: %s",
            config.name,
            config.kv_bits,
            reason,
        )
        return 0
    log.info(
        "model %s: running sequences keep their KV quantized to %d bits (group size %d)",
        config.name,
        config.kv_bits,
        config.kv_group_size,
    )
    return config.kv_bits


def kv_budget_for(config: ModelConfig, weights: int) -> int:
    """Scheduler thread: ``config``'s KV budget in bytes (0: none) for a
    model holding ``weights`` bytes, against the memory MLX may use here
    (Metal's recommended working set, or the memory limit in effect when
    lower or when the device reports none); see :mod:`worker.engine.kv_budget`."""
    from worker.engine.kv_budget import budget_bytes

    usable = [m for m in (mlx_memory.working_set_bytes(), mlx_memory.memory_limit()) if m > 0]
    budget = budget_bytes(config.kv_budget, min(usable) if usable else 0, weights)
    log.info("model %s: KV budget %s = %d bytes (weights %d bytes)", config.name, config.kv_budget, budget, weights)
    return budget


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


REPLAYABLE_KINDS = frozenset(("KVCache", "ArraysCache"))
"""Cache classes a speculative step can bring back to the kept tokens
when not every layer can be trimmed: attention layers are trimmed,
recurrent ``ArraysCache`` layers restored and the kept tokens fed again
(:class:`worker.speculation.draft_rollback.ReplayKept`)."""


SPECULATION_TIMING_ENV = "MLXD_SPECULATION_TIMING"
"""``0``: the drafting controller decides from acceptance alone, not from
measured step times (see :func:`speculation_for`)."""


def speculation_for(
    config: ModelConfig, profile: CacheProfile, vocab: int = 0, grouped: bool = False
) -> Speculation | None:
    """``config``'s :class:`~worker.speculation.drafting.Speculation` (None when
    ``speculative`` is ``none``, or when it cannot run: the model's cache
    (``profile``) cannot be brought back to the accepted tokens after a
    rejected draft (not trimmable and not only attention and recurrent
    layers, or not batchable), or the draft model of ``draft:<source>``
    does not load, has a vocabulary other than ``vocab`` (the target's
    tokenizer size) or a cache that cannot be trimmed; logged as a warning
    for a mode asked for by name, quietly for ``auto``, which is also off
    in a tensor-parallel group (``grouped``)). ``auto`` and ``suffix``
    draft from a :class:`~worker.speculation.suffix_index.TokenIndex` of
    ``speculative_index_tokens`` tokens. Every mode gets a
    :class:`~worker.speculation.controller.DraftController`, timed unless
    ``grouped`` (the ranks of a group must take the same decisions) or the
    environment sets :data:`SPECULATION_TIMING_ENV` to ``0`` (decisions
    from acceptance alone, the same on every run: what the end-to-end
    tests that count drafts use).
    A draft model is loaded here, with the target's ``dtype`` (call on the
    scheduler thread: its MLX work runs there)."""
    mode = config.speculative
    if mode == "none" or (mode == "auto" and grouped):
        return None
    replay = not profile.trimmable and profile.kinds.keys() <= REPLAYABLE_KINDS
    if profile.solo or not (profile.trimmable or replay):
        (log.info if mode == "auto" else log.warning)(
            "model %s: speculative decoding turned off: its cache (%s) cannot be trimmed after a rejected draft",
            config.name,
            ", ".join(sorted(profile.kinds)),
        )
        return None
    draft_model = None
    if mode.startswith(DRAFT_PREFIX):
        draft_model = _draft_model(config, mode[len(DRAFT_PREFIX) :].strip(), vocab)
        if draft_model is None:
            return None
    index = None
    if mode in ("auto", "suffix"):
        index = TokenIndex(SUFFIX_ORDERS, budget=config.speculative_index_tokens)
    log.info(
        "model %s: speculative decoding %s (k=%d, up to %d rows decoding%s)",
        config.name,
        mode,
        config.speculative_tokens,
        config.speculative_max_batch,
        "; recurrent layers restored and kept tokens fed again after each verification" if replay else "",
    )
    return Speculation(
        tokens=config.speculative_tokens,
        ngram=config.speculative_ngram,
        max_batch=config.speculative_max_batch,
        draft_model=draft_model,
        index=index,
        controller=DraftController(
            tokens=config.speculative_tokens,
            timed=not grouped and os.environ.get(SPECULATION_TIMING_ENV, "").strip() != "0",
        ),
        method="suffix" if index is not None else mode,
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


def weight_bytes(model: Any) -> tuple[int, int]:
    """The bytes of ``model``'s parameters held by this process, and of
    those the part in its decoder layers (``model.layers``; 0 when it has
    none): what a tensor-parallel rank keeps of them is its shard."""
    from mlx.utils import tree_flatten

    def size(tree: Any) -> int:
        return sum(array.nbytes for _, array in tree_flatten(tree))

    layers = getattr(model, "layers", None)
    return size(model.parameters()), size([layer.parameters() for layer in layers]) if layers else 0
