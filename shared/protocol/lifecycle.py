"""A worker's lifecycle on the wire (part of the wire contract,
:mod:`shared.protocol`): the contract's version, the handshake
(:class:`Hello`, :class:`Loaded`, :class:`Ready`, :class:`Failed`), liveness
(:class:`Heartbeat` with :class:`WorkerStats`), :class:`Shutdown`, clearing
the prefix cache (:class:`ClearCache`, :class:`CacheCleared`) and the exit
code of a worker whose thread died.
"""

from __future__ import annotations

import msgspec

from shared.protocol.generation import SamplingDefaults

PROTOCOL_VERSION = 2
"""Version of this wire contract (see the module docstring). 2: chat
messages carry ``images`` (:class:`ImagePart`); bumped although the field
is appended with a default, because a worker of version 1 would decode a
request with images and silently drop them."""


EXIT_THREAD_DIED = 3
"""Exit code of a worker one of whose threads died. Before exiting with it
the worker has sent every running request its error (unless its output
thread was the one that died) and waited for those frames to be written,
so the gateway keeps reading its socket a little longer after this exit
(``gateway.workers.process``) rather than answering those requests
itself."""


class Shutdown(msgspec.Struct, frozen=True, tag="shutdown"):
    """Ask the worker to exit: abort everything in flight, then exit 0."""


class WorkerStats(msgspec.Struct, frozen=True, kw_only=True):
    """Counters a worker reports with every heartbeat.

    Totals since the worker started, except the current values ``running``
    (sequences decoding), ``waiting`` (admitted, not yet decoding),
    ``cache_bytes`` and ``cache_entries`` (prefix cache contents).
    ``prompt_tokens`` counts tokens actually prefilled; ``cached_tokens``
    those reused from the prefix cache instead. ``cache_queries`` and
    ``cache_hits`` count look-ups and look-ups that reused anything.
    ``step_seconds`` is the wall time spent in engine steps.
    ``active_memory_bytes``, ``cache_memory_bytes`` and
    ``peak_memory_bytes`` are MLX's own accounting (``mx.get_active_memory``,
    ``mx.get_cache_memory``, ``mx.get_peak_memory``): buffers in use, freed
    buffers MLX keeps for reuse, and the most ever in use by this worker.
    On Metal these count GPU buffers that the process's RSS misses.
    ``disk_cache_*``: the prefix cache's disk tier (see
    :mod:`worker.caches.disk`): bytes and entries on disk now; look-ups
    served from disk and the prompt tokens they covered; entries written;
    files rejected (truncated, corrupt or another model's).
    ``draft_tokens`` / ``draft_accepted_tokens``: speculative decoding's
    drafted tokens and those verification accepted (0 when it is off);
    ``draft_steps``: engine steps that verified drafts;
    ``draft_skipped_steps``: steps that did not, by reason (see
    :meth:`worker.speculation.drafting.Speculation.count`).
    ``cache_refused``: states the prefix cache refused to store because
    they did not hold exactly the tokens of their key (always 0 unless a
    bug moved a sequence past its key; see
    :meth:`worker.caches.prefix.PrefixCache.insert`).
    ``heartbeat_seq``: this heartbeat's number within the worker
    incarnation (1, 2, ...; 0 in a snapshot that is not a heartbeat), so a
    reader can tell a fresh heartbeat from one it has already seen.
    ``vision_prefills``: prompts whose images went through the vision
    tower (a prompt whose images were all found in the prefix cache is not
    counted); ``vision_image_tokens``: the image, video and audio tokens of those prompts.
    ``rerank_pairs``: query-document pairs a rerank worker scored.
    ``audio_seconds_in``: seconds of audio a transcription worker has
    transcribed (counted when a request finishes).
    ``cache_evictions`` / ``disk_cache_evictions``: entries the memory /
    disk tier dropped to stay within its budget (not those a clear or a
    longer entry of the same prefix replaced). ``warm_prompts`` /
    ``warm_tokens``: the model's ``warm_prompts`` prefilled into the prefix
    cache at load, and their prompt tokens.
    ``kv_*``: a generating worker's KV-memory budget (all 0 without one,
    from an older worker, or from a worker of another kind):
    ``kv_bytes`` the bytes the KV caches of the running sequences are
    bounded by now; ``kv_budget_bytes`` the budget (0: none);
    ``kv_waiting`` requests (choices) waiting for KV memory now;
    ``kv_preemptions`` running sequences preempted because the running
    sequences outgrew the budget; ``kv_waited`` requests that had to wait
    for memory before starting; ``kv_tokens`` the tokens the KV caches of
    the running sequences hold now, all together. Appended last with defaults, so no
    protocol bump: an older peer ignores them, and one that does not send
    them reads as no budget.
    """

    running: int = 0
    waiting: int = 0
    steps: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    requests_finished: int = 0
    requests_aborted: int = 0
    max_batch_seen: int = 0
    cache_bytes: int = 0
    cache_budget_bytes: int = 0
    cache_entries: int = 0
    cache_queries: int = 0
    cache_hits: int = 0
    cached_tokens: int = 0
    step_seconds: float = 0.0
    requests_timed_out: int = 0
    active_memory_bytes: int = 0
    cache_memory_bytes: int = 0
    peak_memory_bytes: int = 0
    disk_cache_bytes: int = 0
    disk_cache_entries: int = 0
    disk_cache_hits: int = 0
    disk_cached_tokens: int = 0
    disk_cache_writes: int = 0
    disk_cache_rejected: int = 0
    draft_tokens: int = 0
    draft_accepted_tokens: int = 0
    draft_steps: int = 0
    draft_skipped_steps: dict[str, int] = msgspec.field(default_factory=dict)
    cache_refused: int = 0
    heartbeat_seq: int = 0
    vision_prefills: int = 0
    vision_image_tokens: int = 0
    rerank_pairs: int = 0
    audio_seconds_in: float = 0.0
    cache_evictions: int = 0
    disk_cache_evictions: int = 0
    warm_prompts: int = 0
    warm_tokens: int = 0
    kv_bytes: int = 0
    kv_budget_bytes: int = 0
    kv_waiting: int = 0
    kv_preemptions: int = 0
    kv_waited: int = 0
    kv_tokens: int = 0


class Hello(msgspec.Struct, frozen=True, kw_only=True, tag="hello"):
    """First message of a worker incarnation: its sockets are connected.

    ``protocol`` is the worker's :data:`PROTOCOL_VERSION` (0: a worker from
    before versioning). This message's fields never change incompatibly.
    """

    worker_id: str
    pid: int
    model: str
    protocol: int = 0


class Loaded(msgspec.Struct, frozen=True, kw_only=True, tag="loaded"):
    """The model and tokenizer are in memory.

    ``context_length`` is the most tokens (prompt + completion) a request may
    use; ``load_seconds`` is the wall time of resolving and loading;
    ``blas`` names what runs the matrix products (``metal``, ``accelerate``,
    ``openblas`` or ``builtin``) and
    ``sampling`` where sampling runs (``host``: NumPy, ``device``: MLX).
    ``sampling_defaults`` (None from an older worker) are the settings the
    worker uses where a request sets none.
    The ``*_memory_bytes`` fields are MLX's accounting right after loading
    (as in :class:`WorkerStats`); ``working_set_bytes`` is the device's
    ``max_recommended_working_set_size`` on Metal (0 where the device
    reports none, as on the CPU backend) and ``memory_limit_bytes`` MLX's
    memory limit in effect (``mx.get_memory_limit``). ``vision``: the model
    takes images (a vision worker, see :mod:`shared.model_kind`).
    ``speculation``: the speculative drafting in effect (``suffix``,
    ``prompt_lookup`` or ``draft:<source>``; ``""``: off, also when the
    config asked for it and the model cannot speculate).
    ``reasoning``: the reasoning format the worker parses (``think``,
    ``think_mistral``, ``harmony``; ``""``: none, the model cannot think;
    None: not said, a worker older than this field),
    from the configured ``reasoning_parser`` or detected from the chat
    template and vocabulary (:mod:`shared.reasoning_markup`).
    """

    worker_id: str
    context_length: int
    load_seconds: float
    model_path: str
    blas: str = ""
    sampling: str = ""
    sampling_defaults: SamplingDefaults | None = None
    active_memory_bytes: int = 0
    cache_memory_bytes: int = 0
    peak_memory_bytes: int = 0
    working_set_bytes: int = 0
    memory_limit_bytes: int = 0
    vision: bool = False
    speculation: str = ""
    reasoning: str | None = None


class Ready(msgspec.Struct, frozen=True, kw_only=True, tag="ready"):
    """Warm-up finished; the worker accepts ``GenerateRequest`` from now on."""

    worker_id: str


class Failed(msgspec.Struct, frozen=True, kw_only=True, tag="failed"):
    """A fatal start-up error (for example the model could not be loaded);
    the worker exits right after sending it."""

    worker_id: str
    message: str


class Heartbeat(msgspec.Struct, frozen=True, kw_only=True, tag="heartbeat"):
    """Periodic liveness signal with the worker's current counters."""

    worker_id: str
    stats: WorkerStats


class ClearCache(msgspec.Struct, frozen=True, kw_only=True, tag="clear_cache"):
    """Empty the prefix cache, memory and disk tiers (the worker's
    scheduler thread does it between engine steps; requests running go on
    from their own state). Answered by one :class:`CacheCleared` with the
    same ``clear_id``."""

    clear_id: str


class CacheCleared(msgspec.Struct, frozen=True, kw_only=True, tag="cache_cleared"):
    """The answer to :class:`ClearCache` ``clear_id``: the entries and bytes
    dropped from the memory tier and from the disk tier (files deleted)."""

    worker_id: str
    clear_id: str
    entries: int = 0
    bytes: int = 0
    disk_entries: int = 0
    disk_bytes: int = 0
