"""The :class:`gateway.core.backend.ModelBackend` backed by worker processes.

Maps configured model names and aliases to their :class:`WorkerHandle`,
starts workers on first use within the memory budget
(:class:`gateway.workers.memory_budget.MemoryBudget`, which evicts the least
recently used idle worker when needed), applies config reloads without
dropping work, and drains everything at shutdown. Owns the gateway's private
socket directory. Runs on the event loop only; what it needs from disk
(model files, the socket directory, CURVE keys) is read in worker threads
(:func:`asyncio.to_thread`), never on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec

from gateway.core.backend import ModelFiles, ModelInfo, ModelLimits, Residency
from gateway.core.errors import APIError, bad_request, model_not_found, unavailable
from gateway.core.grants import current_grant
from gateway.images.request import ready_images
from gateway.workers.handle import WorkerHandle
from gateway.workers.inflight import WorkerRequestStream
from gateway.workers.memory_budget import MemoryBudget
from gateway.workers.model_files import read_model_files, read_models_files
from gateway.workers.model_paths import SourceOutsideRoot, check_inside_root
from gateway.workers.node_link import NodeLink
from shared.config import Config, ModelConfig
from shared.model_kind import ModelKind, serves, wrong_kind_message
from shared.model_names import find_name
from shared.protocol import (
    CacheCleared,
    EmbedRequest,
    GenerateRequest,
    RerankRequest,
    SpeechRequest,
    TranscribeRequest,
    WorkerStats,
)
from shared.reasoning_markup import reasoning_format_in
from shared.sockets import make_socket_dir, read_key_pair, remove_socket_dir

log = logging.getLogger("mlxd.gateway.pool")


class WorkerPool:
    """One :class:`WorkerHandle` per configured model.

    Construct it anywhere; await :meth:`start` on the running loop (it
    reads every model's files, then starts the ``preload`` models without
    waiting) and :meth:`stop` at shutdown. ``metrics`` (optional) is handed
    to every handle. ``memory`` is the
    :class:`gateway.workers.memory_budget.MemoryBudget` over its workers.
    """

    def __init__(self, config: Config, metrics: object = None) -> None:
        self.config = config
        self.created = int(time.time())
        self.handles: dict[str, WorkerHandle] = {}
        self.draining = False
        self._metrics = metrics
        self._names: dict[str, str] = {}
        self._socket_dir: str | None = None
        self._room = asyncio.Lock()
        self._retiring: set[asyncio.Task[None]] = set()
        self._links: dict[str, NodeLink] = {}
        self.memory = MemoryBudget(
            lambda: self.config.server, lambda: list(self.handles.values()), lambda: self.config.nodes
        )

    # -- lifecycle --------------------------------------------------------------

    async def start(self) -> None:
        """Create the socket directory, read every model's files and the
        CURVE keys (off the loop), then start the ``preload`` models."""
        self._socket_dir = await asyncio.to_thread(make_socket_dir)
        await asyncio.to_thread(self._node_links)
        self._apply_models(self.config.models, await asyncio.to_thread(read_models_files, self.config.models))
        for model in self.config.models:
            if model.preload:
                asyncio.create_task(self._preload(model.name))

    async def _preload(self, name: str) -> None:
        try:
            await self._acquire(self.handles[name])
        except APIError as err:
            log.error("could not preload %s: %s", name, err.message)

    async def stop(self) -> None:
        """Stop every worker (in parallel) and remove the socket directory."""
        await asyncio.gather(*self._retiring, return_exceptions=True)
        await asyncio.gather(*(h.stop() for h in self.handles.values()))
        if self._socket_dir is not None:
            await asyncio.to_thread(remove_socket_dir, self._socket_dir)

    async def wait_ready(self, timeout: float) -> bool:
        """Wait until every preloaded worker is ready; False on timeout."""
        wanted = [self.handles[m.name] for m in self.config.models if m.preload]
        results = await asyncio.gather(*(h.wait_ready(timeout) for h in wanted))
        return all(results)

    def begin_drain(self) -> None:
        """Refuse new requests from now on (503); in-flight ones go on."""
        self.draining = True

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is in flight; False on timeout."""
        deadline = time.monotonic() + timeout
        while any(h.inflight for h in self.handles.values()):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    def end_inflight(self, message: str) -> None:
        """End every request still in flight, on every worker, with an error
        carrying ``message`` (see :meth:`WorkerHandle.end_inflight`)."""
        for handle in self.handles.values():
            handle.end_inflight(message)

    # -- reload -----------------------------------------------------------------

    async def reload(self, config: Config) -> list[str]:
        """Apply a new config; return one line per change made.

        Every model's files are read again first (off the loop); then the
        change is applied at once: added models become available (and start
        if ``preload``), removed ones stop taking requests and are drained
        and stopped, changed ones are drained and restarted with their new
        settings; API keys and other server settings that can change at run
        time take effect at once (listen address changes need a restart).
        """
        files = await asyncio.to_thread(read_models_files, config.models)
        old = {m.name: m for m in self.config.models}
        new = {m.name: m for m in config.models}
        changes = []
        if (config.server.host, config.server.port) != (self.config.server.host, self.config.server.port):
            changes.append("listen address changed: restart mlxd to apply it")
        if config.nodes != self.config.nodes:
            changes.append("[[nodes]] changed: restart mlxd to apply it")
        self.config = config
        for name in old.keys() - new.keys():
            handle = self.handles.pop(name)
            self._retire(handle.unload("removed from the config"))
            changes.append(f"removed model {name}")
        for name, model in new.items():
            handle = self.handles.get(name)
            if handle is None:
                changes.append(f"added model {name}")
            else:
                handle.server = config.server  # used from the next worker start on
                if model != old[name]:
                    self._retire(self._restart(handle, model, files[name]))
                    changes.append(f"changed model {name}: restarting it after its requests finish")
                else:
                    handle.files = files[name]
        self._apply_models(config.models, files)
        for name in new.keys() - old.keys():
            if new[name].preload:
                asyncio.create_task(self._preload(name))
        return changes

    async def _restart(self, handle: WorkerHandle, model: ModelConfig, files: ModelFiles) -> None:
        was_running = handle.resident
        await handle.unload("its configuration changed")
        handle.model = model
        handle.files = files
        handle.status.peak_memory_bytes = None  # measured under the old configuration
        handle.status.reasoning = None  # the new configuration may parse other markup
        handle.server = self.config.server
        if was_running or model.preload:
            await self._acquire(handle)

    def _retire(self, coro: object) -> None:
        task = asyncio.ensure_future(coro)  # type: ignore[arg-type]
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    def _node_links(self) -> dict[str, NodeLink]:
        """A :class:`NodeLink` per ``[[nodes]]`` entry, with the gateway's
        CURVE key pair (read once; raises
        :class:`shared.sockets.CurveKeyError` when a key is unusable)."""
        if self.config.nodes and not self._links:
            server = self.config.server
            keys = read_key_pair(server.curve_public_key_file, server.curve_secret_key_file)
            self._links = {n.name: NodeLink(n, keys) for n in self.config.nodes}
        return self._links

    def _apply_models(self, models: list[ModelConfig], files: dict[str, ModelFiles]) -> None:
        """Make a handle for each model that has none (with its ``files``)
        and map every name and alias to its model."""
        assert self._socket_dir is not None
        names: dict[str, str] = {}
        links = self._node_links()
        for model in models:
            if model.name not in self.handles:
                self.handles[model.name] = WorkerHandle(
                    model,
                    self.config.server,
                    self._socket_dir,
                    metrics=self._metrics,
                    node=links.get(model.node) if model.node else None,
                )
                self.handles[model.name].files = files[model.name]
            for name in (model.name, *model.aliases):
                names[name] = model.name
        self._names = names

    # -- ModelBackend -------------------------------------------------------------------

    def resolve(self, name: str) -> str:
        """Canonical model name for ``name``; raises the 404 APIError, also
        for a model the request's API key may not use
        (:data:`gateway.core.grants.current_grant`). As in Ollama, a name
        without a tag means its ``:latest``: ``X:latest`` finds a model named
        ``X`` and ``X`` one named ``X:latest``
        (:func:`shared.model_names.find_name`, the one place of that rule);
        any other tag must be configured as written."""
        found = find_name(name, self._names)
        canonical = self._names[found] if found is not None else None
        if canonical is None or not self._granted(canonical):
            raise model_not_found(name)
        return canonical

    def _granted(self, canonical: str) -> bool:
        """Whether the request's key (if any) may use model ``canonical``."""
        grant = current_grant.get()
        if grant is None:
            return True
        handle = self.handles.get(canonical)
        aliases = handle.model.aliases if handle is not None else []
        return grant.allows(canonical, *aliases)

    def limits(self, model: str) -> ModelLimits:
        """The configured request limits of canonical model ``model``."""
        from shared.config_values import parse_size

        config = self.handles[model].model
        return ModelLimits(max_n=config.max_n, max_audio_bytes=parse_size(config.max_audio_bytes, 0))

    def models(self) -> list[ModelInfo]:
        """Every configured model, in config order, with its state."""
        infos = []
        for m in self.config.models:
            if m.name not in self.handles or not self._granted(m.name):
                continue
            status = self.handles[m.name].status
            defaults = status.sampling_defaults
            infos.append(
                ModelInfo(
                    name=m.name,
                    created=self.created,
                    state=status.state,
                    aliases=tuple(m.aliases),
                    sampling_defaults=None if defaults is None else msgspec.structs.asdict(defaults),
                    context_length=status.context_length,
                    source=m.source,
                    kind=self.kind(m.name),
                    thinking=self.thinks(m.name),
                )
            )
        return infos

    def kind(self, model: str) -> ModelKind | None:
        """Whether canonical ``model`` generates (text, or also images) or
        embeds, from its config or its local files (as last read: at start,
        on reload, at each worker start), else ``vision`` when its worker
        reported so at load (None when unknown, e.g. a Hugging Face repo id;
        its worker then refuses the wrong requests itself)."""
        kind = self.handles[model].files.kind
        if kind is None and self.handles[model].status.vision:
            return "vision"
        return kind

    def thinks(self, model: str) -> bool | None:
        """Whether canonical ``model`` has reasoning markup (can think), the
        one rule every listing and refusal asks: what its worker reported
        when it last loaded this configuration; before that, no for a model
        of a kind that does not generate, the configured
        ``reasoning_parser`` when it is not ``auto`` (``none``: no; a
        format: yes), yes when the chat template the gateway read shows
        reasoning markers (:func:`shared.reasoning_markup.reasoning_format_in`,
        the worker's first test); else None: only the worker can tell (it
        also looks at the vocabulary). Reads no file."""
        handle = self.handles[model]
        if handle.status.reasoning is not None:
            return bool(handle.status.reasoning)
        if self.kind(model) not in (None, "generate", "vision"):
            return False
        if handle.model.reasoning_parser != "auto":
            return handle.model.reasoning_parser != "none"
        return True if reasoning_format_in(handle.files.chat_template) else None

    async def submit(
        self,
        model: str,
        request: GenerateRequest | EmbedRequest | RerankRequest | SpeechRequest | TranscribeRequest,
        keep_alive: float | None = None,
    ) -> WorkerRequestStream:
        """Route ``request`` to ``model``'s worker, starting it if needed;
        ``keep_alive`` as in :meth:`WorkerHandle.submit`.

        Raises:
            gateway.core.errors.APIError: 400 ``wrong_model_kind`` when the model
                is of another kind than the request needs (an embedding
                model asked to generate, a generator asked to rerank, ...); 400 for images a text model cannot read or
                a remote image that may not be fetched
                (:func:`gateway.images.request.ready_images`); 503 while draining, when the model cannot
                be loaded (or not within the memory budget), or when its
                queue is full.
        """
        if self.draining:
            raise unavailable("the server is shutting down", retry_after=5)
        handle = self.handles.get(model)
        if handle is None:
            raise model_not_found(model)
        kind = self.kind(model)
        needed = needed_kind(request)
        if kind is not None and not serves(kind, needed):
            raise bad_request(wrong_kind_message(model, kind, needed), param="model", code="wrong_model_kind")
        if isinstance(request, GenerateRequest):
            request = await ready_images(request, model, kind, self.config.images)
            request = with_key_name(request)
        await self._acquire(handle)
        return handle.submit(request, keep_alive=keep_alive)

    def cancel(self, request_id: str) -> str | None:
        """End the request in flight with id ``request_id`` as a client
        disconnect would (its client gets one terminal ``abort``); return
        its model, or None when no such request is in flight (or it was
        made with another API key than the current request's)."""
        grant = current_grant.get()
        for name, handle in self.handles.items():
            if handle.cancel(request_id, grant.name if grant is not None else None):
                return name
        return None

    async def clear_cache(self, model: str) -> CacheCleared | None:
        """Empty canonical ``model``'s prefix cache, memory and disk tiers;
        what was dropped, or None when its worker is not ready (see
        :meth:`WorkerHandle.clear_cache`)."""
        return await self.handles[model].clear_cache(self.config.server.drain_timeout)

    def cache_stats(self, model: str) -> tuple[str, WorkerStats | None]:
        """Canonical ``model``'s state and its worker's latest heartbeat
        counters (None: no running worker has sent a heartbeat yet)."""
        status = self.handles[model].status
        reported = status.pid and status.stats.heartbeat_seq
        return status.state, status.stats if reported else None

    async def load(self, model: str, keep_alive: float | None = None) -> None:
        """Start canonical ``model``'s worker if needed and wait until it is
        ready, then set its idle time to ``keep_alive`` (see
        :meth:`WorkerHandle.keep`).

        Raises:
            gateway.core.errors.APIError: 503 as :meth:`submit`.
        """
        if self.draining:
            raise unavailable("the server is shutting down", retry_after=5)
        handle = self.handles[model]
        await self._acquire(handle)
        handle.keep(keep_alive)

    async def unload(self, model: str, why: str = "asked to unload (keep_alive 0)") -> None:
        """Unload canonical ``model``'s worker once its requests finish
        (no-op when it is not resident); it starts again on next use.
        ``why`` goes into the log line."""
        await self.handles[model].unload(why, soft=True)

    def resident(self) -> list[Residency]:
        """Every model whose worker is loaded (state ``ready``), in config
        order, with its memory and idle expiry, and every model being
        downloaded for its worker (with the pull's progress)."""
        found = []
        for m in self.config.models:
            handle = self.handles.get(m.name)
            if handle is not None and handle.status.state == "downloading":
                found.append(Residency(m.name, 0, None, None, download=handle.status.download))
            if handle is None or handle.status.state != "ready":
                continue
            stats = handle.status.stats
            found.append(
                Residency(
                    name=m.name,
                    memory_bytes=max(stats.active_memory_bytes, handle.status.memory_bytes or 0)
                    or self.memory.estimate(handle),
                    expires_at=handle.expires_at(),
                    context_length=handle.status.context_length,
                )
            )
        return found

    async def model_files(self, models: list[str]) -> dict[str, ModelFiles]:
        """What each of the canonical ``models``' files hold now, by name:
        read in one worker thread (never on the event loop), once per model,
        on every call (so a listing never shows stale files)."""
        sources = {name: (self.handles[name].model.source, self.handles[name].model.kind) for name in models}
        return await asyncio.to_thread(lambda: {n: read_model_files(src, kind) for n, (src, kind) in sources.items()})

    async def _acquire(self, handle: WorkerHandle) -> None:
        await handle.settle(self.config.server.worker_start_timeout)
        if handle.status.state != "ready":
            async with self._room:
                if not handle.resident:
                    if not handle.model.node:
                        await self._check_path(handle)
                    model = handle.model
                    files = await asyncio.to_thread(read_model_files, model.source, model.kind)
                    if handle.model is model:  # not changed by a reload meanwhile
                        handle.files = files  # weights may have changed on disk: size them again
                    await self.memory.make_room(handle)
                    handle.mlx_limits = self.memory.mlx_limits(handle)
                    handle.start()
        await handle.acquire(self.config.server.worker_start_timeout)

    async def _check_path(self, handle: WorkerHandle) -> None:
        try:
            await asyncio.to_thread(check_inside_root, handle.model.source, self.config.server.models_root)
        except SourceOutsideRoot as exc:
            raise APIError(503, str(exc), code="model_unavailable") from None

    # -- health ------------------------------------------------------------------------

    def health(self) -> dict[str, object]:
        """The body of ``GET /health``: each model's worker status."""
        return {
            "status": "draining" if self.draining else "ok",
            "models": {name: msgspec.to_builtins(h.status) for name, h in self.handles.items()},
        }

    def readiness(self) -> tuple[bool, dict[str, object]]:
        """Whether every preloaded model is ready (and the server is not
        draining), with each model's state, for ``GET /ready``."""
        states = {name: h.status.state for name, h in self.handles.items()}
        preloaded = [m.name for m in self.config.models if m.preload]
        ready = not self.draining and all(states.get(n) == "ready" for n in preloaded)
        return ready, {"ready": ready, "models": states}


def needed_kind(request: GenerateRequest | EmbedRequest | RerankRequest | SpeechRequest | TranscribeRequest) -> str:
    """The kind of model ``request`` needs: ``embedding``, ``rerank``,
    ``speech``, ``transcription`` or ``generate`` (which a vision model also serves)."""
    if isinstance(request, EmbedRequest):
        return "embedding"
    if isinstance(request, RerankRequest):
        return "rerank"
    if isinstance(request, SpeechRequest):
        return "speech"
    if isinstance(request, TranscribeRequest):
        return "transcription"
    return "generate"


def with_key_name(request: GenerateRequest) -> GenerateRequest:
    """``request`` carrying the name of the API key it came with (the
    current :data:`gateway.core.grants.current_grant`'s; unchanged when it
    has one already or there is no key), so its worker keeps one key's
    drafting material apart from another's."""
    grant = current_grant.get()
    if request.key_name or grant is None:
        return request
    return msgspec.structs.replace(request, key_name=grant.name)
