"""The status snapshot: what ``GET /v1/status`` answers, what the dashboard
page and ``mlxd top`` draw.

One :class:`Status` per call, built by :mod:`gateway.dashboard.snapshot`
from state the gateway already holds. Rates are ``None`` where nothing was
counted yet (no look-up, no draft), never a made-up 0. Byte counts are
MLX's own (``mx.get_active_memory`` and friends in the worker), so on Metal
they include the GPU buffers the process's resident size misses. Recent
requests carry ids, counts and timings only: never prompt or answer text.

The admin bodies (:class:`ModelAction`, :class:`ActionResult`) are those of
``POST /v1/admin/load``, ``/unload`` and ``/reload``.

The Structs are the contract of the JSON; the OpenAPI document is generated
from them (:mod:`gateway.openapi_document`). Fields may be added; none is
removed or renamed without a note in ``docs/operations/monitoring.md``.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec


class MemoryStatus(msgspec.Struct, kw_only=True):
    """One model's memory. ``mlx_active_bytes``: buffers MLX has in use in
    its worker (latest heartbeat; 0 without a worker); ``mlx_cache_bytes``:
    freed buffers MLX keeps for reuse; ``mlx_peak_bytes``: the most this
    model configuration's workers ever had in use (kept after an unload);
    ``limit_bytes``: the worker's MLX memory limit (the memory budget's
    share for it; MLX's own default when no budget is set; 0 before a
    load); ``estimate_bytes``: what the memory budget counts for the model,
    also while it is unloaded; ``resident_bytes``: the worker process's
    resident size when it became ready (None: remote, or not loaded)."""

    mlx_active_bytes: int
    mlx_cache_bytes: int
    mlx_peak_bytes: int
    limit_bytes: int
    estimate_bytes: int
    resident_bytes: int | None


class PrefixCacheStatus(msgspec.Struct, kw_only=True):
    """The prefix cache's memory tier of one worker, since it started.
    ``hit_rate`` is ``hits / queries`` (None before the first look-up);
    ``cached_tokens`` the prompt tokens reused instead of prefilled."""

    queries: int
    hits: int
    hit_rate: float | None
    cached_tokens: int
    entries: int
    bytes: int
    budget_bytes: int


class DiskTierStatus(msgspec.Struct, kw_only=True):
    """The prefix cache's disk tier of one worker, since it started.
    ``hit_rate`` is look-ups served from disk over all look-ups (None before
    the first); ``rejected`` counts files refused as truncated, corrupt or
    another model's."""

    hits: int
    hit_rate: float | None
    cached_tokens: int
    entries: int
    bytes: int
    writes: int
    rejected: int


class SpeculationStatus(msgspec.Struct, kw_only=True):
    """Speculative decoding of one worker, since it started: ``method`` as
    the loaded worker runs it (``suffix``, ``prompt_lookup`` or
    ``draft:<model>``; before a worker has loaded: as configured, e.g.
    ``auto``), tokens drafted and
    accepted, and ``acceptance`` = accepted / drafted (None before the first
    draft)."""

    method: str
    draft_tokens: int
    accepted_tokens: int
    acceptance: float | None


class KVStatus(msgspec.Struct, kw_only=True):
    """The KV-memory budget of one worker (latest heartbeat; all 0 for a
    model without a budget, without a worker, or of a kind that does not
    generate). ``bytes``: what the KV caches of the running sequences are
    bounded by now (the budget's accounting); ``budget_bytes``: the budget
    (0: none); ``waiting``: requests (each choice counts) waiting for KV
    memory now; since the worker started, ``preemptions``: running
    sequences preempted because the running sequences outgrew the budget,
    and ``waited``: requests that had to wait for memory before
    starting. ``tokens``: the tokens the running sequences' KV caches hold
    now, all together."""

    bytes: int
    budget_bytes: int
    waiting: int
    preemptions: int
    waited: int
    tokens: int


class ModelStatus(msgspec.Struct, kw_only=True):
    """One configured model.

    ``state``: ``unloaded``, ``starting``, ``loading``, ``ready``,
    ``draining``, ``restarting`` (its worker died; restarted after a
    back-off), ``failed`` (could not be loaded; ``error`` says why) or
    ``stopped``; ``error`` is the last load or crash error (None once
    ready). ``kind``: ``generate``, ``vision``, ``embedding`` or ``rerank`` (None when
    not known before a load). ``node``: the ``[[nodes]]`` entry running
    it (None: this machine). ``inflight``: requests the gateway has sent
    to it and not seen end; ``running`` and ``waiting``: sequences decoding
    and admitted but not yet decoding (latest heartbeat).
    ``requests_finished`` and ``generated_tokens`` count since its worker
    started. ``speculation`` is None when speculative decoding is off.
    ``kv``: the worker's KV-memory budget (:class:`KVStatus`).
    ``expires_at``: Unix time it unloads if left idle (None: never, or not
    loaded)."""

    name: str
    aliases: list[str]
    kind: str | None
    state: str
    error: str | None
    node: str | None
    pid: int | None
    restarts: int
    load_seconds: float | None
    context_length: int | None
    inflight: int
    running: int
    waiting: int
    requests_finished: int
    generated_tokens: int
    memory: MemoryStatus
    prefix_cache: PrefixCacheStatus
    disk_cache: DiskTierStatus
    speculation: SpeculationStatus | None
    kv: KVStatus
    expires_at: float | None


class Sample(msgspec.Struct, kw_only=True):
    """One second of the gateway's life. ``t``: Unix time at its end;
    ``tokens_per_second``: completion tokens streamed to clients in that
    second, all models together; ``ttft_p50`` / ``ttft_p95``: seconds to
    the first token of the requests whose first token came in that second
    (None: none did); ``memory_bytes``: MLX memory in use per model (models
    without a worker left out); ``running`` / ``waiting``: sequences over
    all workers."""

    t: float
    tokens_per_second: float
    ttft_p50: float | None
    ttft_p95: float | None
    memory_bytes: dict[str, int]
    running: int
    waiting: int


class RecentRequest(msgspec.Struct, kw_only=True):
    """One recent (or running) request: its id, canonical model, the
    protocol it came in by (``openai``, ``responses``, ``anthropic``,
    ``ollama``, or the request path for anything else), Unix start time,
    token counts (``cached_tokens`` of ``prompt_tokens`` came from the
    prefix cache), seconds to its first token (None: none yet, or an
    embedding), seconds so far or in all, and ``finish``: ``stop``,
    ``length``, ``tool_calls``, ``abort``, ``error``, or None while it
    runs. No prompt or answer text, ever."""

    id: str
    model: str
    protocol: str
    started_at: float
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    ttft_seconds: float | None
    duration_seconds: float
    finish: str | None


class McpServerStatus(msgspec.Struct, kw_only=True):
    """One ``[[mcp_servers]]`` entry: its transport (``stdio`` or
    ``streamable_http``), whether its session is up, the last error, and
    how many of its tools are allowed."""

    name: str
    transport: str
    connected: bool
    error: str | None
    tools: int


class NodeStatus(msgspec.Struct, kw_only=True):
    """One ``[[nodes]]`` entry, judged by the workers it runs: ``up`` when
    one of them is loading or ready, ``down`` when one could not be reached
    or died (``error`` says why), ``idle`` when none is running.
    ``models`` are the models configured on it."""

    name: str
    address: str
    state: Literal["up", "down", "idle"]
    error: str | None
    models: list[str]


class Status(msgspec.Struct, kw_only=True):
    """The ``GET /v1/status`` body.

    ``version``: mlxd's; ``time``: Unix time of the snapshot;
    ``started_at``: when the gateway started; ``draining``: refusing new
    requests while shutting down; ``memory_budget_bytes``: this machine's
    memory budget (0: none); ``models`` in config order; ``samples``: the
    per-second history, oldest first (only those after ``since`` when the
    request gave one; at most :data:`gateway.dashboard.recorder.SAMPLES`);
    ``requests``: the most recent requests, newest first (running ones
    included); ``mcp_servers`` and ``nodes`` as configured."""

    object: Literal["mlxd.status"] = "mlxd.status"
    version: str
    time: float
    started_at: float
    draining: bool
    memory_budget_bytes: int
    models: list[ModelStatus]
    samples: list[Sample]
    requests: list[RecentRequest]
    mcp_servers: list[McpServerStatus]
    nodes: list[NodeStatus]


class ModelAction(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The body of ``POST /v1/admin/load`` and ``/v1/admin/unload``: a
    configured model name or alias."""

    model: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class ActionResult(msgspec.Struct, kw_only=True):
    """The answer of an admin action: what was asked (``load``, ``unload``
    or ``reload``), the model concerned (None for a reload), and one line
    per change made or under way (``changes``)."""

    object: Literal["mlxd.admin_action"] = "mlxd.admin_action"
    action: Literal["load", "unload", "reload"]
    model: str | None
    changes: list[str]
