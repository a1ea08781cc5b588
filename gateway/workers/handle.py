"""One configured model: its worker's lifecycle and the requests routed to it.

A :class:`WorkerHandle` starts its worker on first use (or at start with
``preload``), loads it exactly once however many requests arrive meanwhile,
routes requests to it and their outputs back, unloads it after ``ttl``
seconds idle, drains it before a stop or a config change, and restarts it
with back-off when it dies or hangs. When a worker dies every request in
flight on it ends at once with a terminal ``unavailable`` error.

The requests in flight on it, their accounting and their log lines are
kept by :class:`gateway.workers.inflight.InflightRequests`; what is known about the
worker by :class:`gateway.workers.status.WorkerStatus`.

States: ``unloaded`` (no process), ``downloading`` (``server.auto_pull``
fetching the model before its worker starts), ``starting`` and ``loading``
(process up, model loading), ``ready``, ``draining`` (finishing in-flight work, taking no
new requests), ``restarting`` (after a crash, waiting to retry),
``failed`` (the model could not be loaded; retried with back-off; or the
worker speaks another wire protocol version: stopped and never started
again by this gateway, see :meth:`WorkerHandle._refuse_protocol`) and
``stopped`` (the server is exiting).

Everything here runs on the gateway's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import msgspec

from gateway.core.backend import UNREAD
from gateway.core.errors import OVERLOADED_RETRY_AFTER, APIError, unavailable
from gateway.core.ids import new_id
from gateway.workers.inflight import InflightRequests, PendingRequest, WorkerRequestStream
from gateway.workers.process import Incarnation, run_incarnation
from gateway.workers.status import WorkerStatus, resident_bytes
from shared.config import ModelConfig, ServerConfig
from shared.config_values import parse_duration
from shared.protocol import (
    PROTOCOL_VERSION,
    AbortRequest,
    CacheCleared,
    ClearCache,
    Failed,
    GenerateRequest,
    Heartbeat,
    Hello,
    Loaded,
    Ready,
    Shutdown,
    StepOutputs,
    WorkerMessage,
    WorkerStats,
)

log = logging.getLogger("mlxd.gateway.worker")

MAX_BACKOFF = 30.0
"""Longest wait (seconds) between restarts of a worker that keeps dying."""


class WorkerHandle:
    """Owns the worker process of one configured model.

    ``socket_dir`` is the gateway's private socket directory; ``metrics``
    (optional) gets a timer per request. ``mlx_limits`` (memory limit,
    cache limit; see :func:`gateway.workers.process.run_incarnation`) is
    read at each worker start; the pool sets it before :meth:`start`.
    ``node`` (a :class:`gateway.workers.node_link.NodeLink`, optional) runs the
    worker on another machine instead of as a local process; everything
    else is the same. ``files`` is what the pool last read from the
    model's files (:class:`gateway.workers.model_files.ModelFiles`: kind, weight
    size), read off the event loop and set by the pool.
    """

    def __init__(
        self,
        model: ModelConfig,
        server: ServerConfig,
        socket_dir: str,
        *,
        metrics: Any = None,
        node: Any = None,
    ) -> None:
        self.model = model
        self.node = node
        self.server = server
        self.status = WorkerStatus(node=node.name if node is not None else None)
        self.files = UNREAD
        self.last_used = 0.0
        self._socket_dir = socket_dir
        self._metrics = metrics
        self._requests = InflightRequests(on_retired=self._retired)
        self._incarnation: Incarnation | None = None
        self._task: asyncio.Task[None] | None = None
        self._wanted = False
        self._ready = asyncio.Event()
        self._state_changed = asyncio.Event()
        self._idle_timer: asyncio.TimerHandle | None = None
        self._stopping: asyncio.Task[None] | None = None
        self._soft_stop = False  # the unload in progress is an idle / keep_alive one
        self._refused = False  # a worker spoke another protocol: never start again
        self.mlx_limits: tuple[int, int | None] = (0, None)
        self._keep_alive: float | None = None  # the latest request's idle time (None: the model's ttl)
        self._idle_deadline: float | None = None  # wall-clock end of the running idle timer
        self._clears: dict[str, asyncio.Future[CacheCleared]] = {}  # ClearCache sent, answer awaited

    # -- lifecycle ------------------------------------------------------------

    @property
    def resident(self) -> bool:
        """Whether a worker process is (or is being) started."""
        return self._task is not None and not self._task.done()

    @property
    def idle(self) -> bool:
        """Ready with nothing in flight."""
        return self.status.state == "ready" and not self._requests

    @property
    def inflight(self) -> int:
        """Requests in flight."""
        return len(self._requests)

    def start(self) -> None:
        """Start the worker if it is not running (no-op otherwise)."""
        if self.resident or self.status.state == "stopped" or self._refused:
            return
        self._wanted = True
        self._ready.clear()
        self._set_state("starting")
        self._task = asyncio.create_task(self._supervise(), name=f"supervise:{self.model.name}")

    async def wait_ready(self, timeout: float) -> bool:
        """Wait until the worker is ready; False on timeout."""
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def acquire(self, timeout: float) -> None:
        """Make sure the worker is running and ready, starting it if needed;
        concurrent callers share one start.

        Raises:
            gateway.core.errors.APIError: 503 (with the reason) when the model
                failed to load, is draining, is not ready in ``timeout``, or
                runs on a node and its last session there ended (node down,
                unreachable or refusing our key) and is being retried.
        """
        state = self.status.state
        if state == "failed":
            raise unavailable(f"model '{self.model.name}' failed to load: {self.status.last_error}", retry_after=5)
        if state in ("draining", "stopped"):
            raise unavailable(f"model '{self.model.name}' is {state}")
        if state == "ready":
            return
        self.start()
        deadline = time.monotonic() + timeout
        while self.status.state != "ready":
            given_up = ("failed", "draining", "stopped", "unloaded")
            if self.status.state in given_up or (self.node is not None and self.status.state == "restarting"):
                detail = f": {self.status.last_error}" if self.status.last_error else ""
                raise unavailable(f"model '{self.model.name}' is {self.status.state}{detail}", retry_after=5)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise unavailable(f"model '{self.model.name}' is still {self.status.state}", retry_after=5)
            self._state_changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._state_changed.wait(), remaining)

    async def unload(self, why: str, timeout: float | None = None, *, soft: bool = False) -> None:
        """Stop the worker gracefully: take no new requests, let in-flight
        ones finish (at most ``timeout`` s, default the drain timeout), then
        ask it to exit. The handle can start again later. A ``soft``
        unload (idle time over, or a request's ``keep_alive`` 0) makes
        requests that arrive meanwhile wait for it and start the worker
        again (see :meth:`settle`) instead of being refused."""
        if not self.resident:
            return
        if self._stopping is None or self._stopping.done():
            self._soft_stop = soft
            self._stopping = asyncio.create_task(self._drain_and_stop(why, timeout))
        await asyncio.shield(self._stopping)

    async def settle(self, timeout: float) -> None:
        """Wait (at most ``timeout`` s) for a soft unload in progress to end,
        so the caller can start the worker again; returns at once
        otherwise. Never raises on timeout (the caller then sees the
        ``draining`` state)."""
        stopping = self._stopping
        if stopping is None or stopping.done() or not self._soft_stop:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(stopping), timeout)

    async def stop(self, timeout: float = 5.0) -> None:
        """Final stop at server exit: fail what is still in flight, stop the
        worker (killed after ``timeout`` s) and never start again."""
        self._cancel_idle_timer()
        self._wanted = False
        self._requests.fail_all("the server is shutting down")
        await self._stop_process(timeout)
        self._set_state("stopped")

    async def _drain_and_stop(self, why: str, timeout: float | None) -> None:
        self._cancel_idle_timer()
        self._set_state("draining")
        limit = self.server.drain_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while self._requests and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        self._requests.fail_all(f"model '{self.model.name}' was stopped ({why})")
        self._wanted = False
        await self._stop_process(5.0)
        self._keep_alive = None  # a request's keep_alive lasts while its worker does
        self._set_state("unloaded")
        log.info("model %s unloaded (%s)", self.model.name, why)

    async def _stop_process(self, timeout: float) -> None:
        incarnation, task = self._incarnation, self._task
        if incarnation is not None:
            incarnation.send(Shutdown())
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = None

    # -- requests -------------------------------------------------------------

    def submit(self, request: GenerateRequest, keep_alive: float | None = None) -> WorkerRequestStream:
        """Send ``request`` to the ready worker and return its output stream.

        ``keep_alive`` (seconds; negative: never; None: the model's ``ttl``)
        becomes how long the worker stays loaded once idle, until the next
        request sets its own (see :meth:`keep`).

        Raises:
            gateway.core.errors.APIError: 503 when the worker is not ready, or 503
                ``overloaded`` when its queue is full.
        """
        incarnation = self._incarnation
        if self.status.state != "ready" or incarnation is None:
            detail = f": {self.status.last_error}" if self.status.last_error else ""
            raise unavailable(f"model '{self.model.name}' is {self.status.state}{detail}")
        if self._requests.sequences + request.n > self.model.max_batch_size + self.model.max_queued:
            raise APIError(
                503,
                f"model '{self.model.name}' is at capacity; retry shortly",
                code="overloaded",
                retry_after=OVERLOADED_RETRY_AFTER,
            )
        if self.model.request_timeout and request.timeout is None:
            request = msgspec.structs.replace(request, timeout=self.model.request_timeout)
        metrics = self._metrics
        timer = None if metrics is None else metrics.request_started(self.model.name, request_id=request.request_id)
        pending = PendingRequest(incarnation.number, request.n, timer, self.model.name)
        if getattr(request, "count_only", False):
            pending.grant = None  # counting a prompt's tokens spends none
        self._requests.add(request.request_id, pending)
        self._keep_alive = keep_alive
        self._cancel_idle_timer()
        self.last_used = time.monotonic()
        incarnation.send(request)
        return WorkerRequestStream(request.request_id, pending, self.abort)

    def cancel(self, request_id: str, key_name: str | None) -> bool:
        """End request ``request_id`` if it is in flight here (and was
        submitted under API key ``key_name``, when given): its client gets
        one terminal ``abort`` and the worker drops it, as after a
        disconnect. False when it is not."""
        return self._requests.cancel(request_id, self._incarnation, key_name)

    async def clear_cache(self, timeout: float) -> CacheCleared | None:
        """Have the ready worker empty its prefix cache (memory and disk
        tiers) and return what it dropped; None when no worker is ready
        (nothing in memory then; the disk tier stays until it runs).

        Raises:
            gateway.core.errors.APIError: 503 when the worker does not answer
                within ``timeout`` seconds or stops meanwhile.
        """
        incarnation = self._incarnation
        if self.status.state != "ready" or incarnation is None:
            return None
        clear_id = new_id("clear-")
        answer: asyncio.Future[CacheCleared] = asyncio.get_running_loop().create_future()
        self._clears[clear_id] = answer
        try:
            incarnation.send(ClearCache(clear_id=clear_id))
            return await asyncio.wait_for(answer, timeout)
        except TimeoutError:
            raise unavailable(f"model '{self.model.name}' did not clear its cache", retry_after=5) from None
        finally:
            self._clears.pop(clear_id, None)

    def abort(self, request_id: str, pending: PendingRequest) -> None:
        """Forget ``request_id`` and ask its worker to drop it (if it is still
        the same incarnation)."""
        self._requests.abort(request_id, pending, self._incarnation)

    # -- supervision ----------------------------------------------------------

    async def _supervise(self) -> None:
        backoff = 1.0
        while self._wanted:
            if not await self._fetch_source():
                if not self._wanted:
                    return
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
                continue
            started = time.monotonic()
            self.status.incarnation += 1
            self.status.stats = WorkerStats()
            run = run_incarnation if self.node is None else self.node.run_incarnation
            why = await run(
                self.model,
                self.server,
                self._socket_dir,
                self.status.incarnation,
                on_start=self._started,
                on_message=self._dispatch,
                silence_limit=self._silence_limit,
                memory_limit=self.mlx_limits[0],
                cache_limit=self.mlx_limits[1],
            )
            self._incarnation = None
            self.status.pid = None
            self._ready.clear()
            self._requests.fail_all("the model worker stopped unexpectedly; retry the request")
            for answer in self._clears.values():
                if not answer.done():
                    answer.set_exception(unavailable(f"model '{self.model.name}' stopped before clearing its cache"))
            if not self._wanted:
                return
            failed = self.status.state == "failed"
            self.status.last_error = self.status.last_error if failed else why
            if time.monotonic() - started > 60:
                backoff = 1.0
            self.status.restarts += 1
            self._set_state("failed" if failed else "restarting")
            log.warning("worker for %s ended (%s); restarting in %.0fs", self.model.name, why, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)

    async def _fetch_source(self) -> bool:
        """With ``server.auto_pull``, pull the model's source before its
        worker starts when it is not local yet: state ``downloading``,
        progress in ``status.download`` (see :mod:`gateway.hub.auto_pull`).
        False when the pull failed (state ``failed``; a refused pull, such
        as an unknown repo or one over the size cap, is not retried until
        the next request, a failed transfer is retried with back-off)."""
        from gateway.hub.auto_pull import download_report, ensure_local
        from gateway.hub.catalog import CatalogError
        from gateway.hub.pull import PullError, PullRefused

        def progress(status: Any) -> None:
            self.status.download = download_report(status)
            if status.phase in ("listing", "downloading", "verifying") and self.status.state != "downloading":
                self._set_state("downloading")

        try:
            if await ensure_local(self.model, self.server, progress):
                self._set_state("starting")
            return True
        except (PullError, CatalogError) as exc:
            self.status.last_error = f"could not pull the model: {exc}"
            if isinstance(exc, (PullRefused, CatalogError)):
                self._wanted = False
            self._set_state("failed")
            log.error("model %s: %s", self.model.name, self.status.last_error)
            return False

    def _started(self, incarnation: Incarnation) -> None:
        self._incarnation = incarnation
        self.status.pid = incarnation.pid

    def _silence_limit(self) -> float:
        if self.status.state in ("ready", "draining"):
            return self.server.heartbeat_timeout
        return self.server.worker_start_timeout

    def _dispatch(self, message: WorkerMessage) -> None:
        if self._refused:
            return  # nothing a refused worker says is trusted
        if isinstance(message, StepOutputs):
            for output in message.outputs:
                self._requests.route(output, self._incarnation)
        elif isinstance(message, Heartbeat):
            self.status.heartbeat(message.stats)
        elif isinstance(message, CacheCleared):
            answer = self._clears.get(message.clear_id)
            if answer is not None and not answer.done():
                answer.set_result(message)
        elif isinstance(message, Hello):
            if message.protocol != PROTOCOL_VERSION:
                self._refuse_protocol(message)
                return
            self._set_state("loading")
        elif isinstance(message, Loaded):
            self.status.loaded(message)
            log.info(
                "model %s loaded in %.1fs from %s (BLAS: %s, sampling: %s, MLX memory: %d MiB, limit %d MiB)",
                self.model.name,
                message.load_seconds,
                message.model_path,
                message.blas,
                message.sampling,
                message.active_memory_bytes >> 20,
                message.memory_limit_bytes >> 20,
            )
        elif isinstance(message, Ready):
            self.status.last_error = None
            self.status.memory_bytes = resident_bytes(self.status.pid) if self.node is None else None
            self.last_used = time.monotonic()
            self._set_state("ready")
            self._ready.set()
            self._schedule_idle()
            log.info("model %s is ready", self.model.name)
        elif isinstance(message, Failed):
            self.status.last_error = message.message
            self._set_state("failed")
            log.error("model %s failed to load: %s", self.model.name, message.message)

    def _refuse_protocol(self, hello: Hello) -> None:
        """Stop a worker that speaks another wire protocol version (its
        files changed under this gateway, e.g. an upgrade in place): one
        error line, state ``failed``, and this handle never starts a
        worker again (the same files would start the same worker; only a
        gateway restarted from the new files speaks their version).
        Requests get a 503 naming the cause until mlxd restarts."""
        self.status.last_error = (
            f"the worker speaks wire protocol v{hello.protocol} but this gateway speaks v{PROTOCOL_VERSION}"
            " (mlxd was upgraded while running?); restart mlxd"
        )
        log.error("refused the worker for %s (pid %d): %s", self.model.name, hello.pid, self.status.last_error)
        self._refused = True
        self._wanted = False
        self._set_state("failed")
        if self._incarnation is not None:
            self._incarnation.kill()

    def _retired(self) -> None:
        """A request stopped being tracked: mark the worker used, and start
        the idle timer once nothing is in flight."""
        self.last_used = time.monotonic()
        if not self._requests:
            self._schedule_idle()

    def end_inflight(self, message: str) -> None:
        """End every request in flight at once with an ``unavailable`` error
        terminal carrying ``message`` (the drain timeout uses it) and ask the
        worker to drop them. Event loop only."""
        ids = self._requests.ids()
        self._requests.fail_all(message)
        if ids and self._incarnation is not None:
            self._incarnation.send(AbortRequest(ids))

    # -- idle unload ------------------------------------------------------------

    def idle_seconds(self) -> float:
        """How long the worker stays loaded once idle: the latest request's
        ``keep_alive`` if it set one, else the model's ``ttl`` (negative:
        never unloaded for idleness)."""
        return self._keep_alive if self._keep_alive is not None else parse_duration(self.model.ttl)

    def keep(self, keep_alive: float | None) -> None:
        """Set the idle time as a request's ``keep_alive`` does (see
        :meth:`submit`) without a request, e.g. an Ollama load-only call,
        and restart the idle timer if the worker is idle."""
        self._keep_alive = keep_alive
        self._cancel_idle_timer()
        self._schedule_idle()

    def expires_at(self) -> float | None:
        """Wall-clock time (Unix seconds) at which the worker unloads if no
        request comes: the idle timer's end, or ``now + idle_seconds()``
        while requests run; None when it never unloads for idleness or is
        not resident."""
        seconds = self.idle_seconds()
        if not self.resident or seconds < 0:
            return None
        if self._idle_timer is not None and self._idle_deadline is not None:
            return self._idle_deadline
        return time.time() + seconds

    def _schedule_idle(self) -> None:
        ttl = self.idle_seconds()
        if ttl < 0 or self.status.state != "ready" or self._requests:
            return
        self._cancel_idle_timer()
        loop = asyncio.get_running_loop()
        self._idle_deadline = time.time() + ttl
        self._idle_timer = loop.call_later(ttl, self._idle_expired)

    def _idle_expired(self) -> None:
        self._idle_timer = None
        if self.idle:
            asyncio.create_task(self._unload_if_idle())

    async def _unload_if_idle(self) -> None:
        """Unload for idleness unless a request arrived since the timer
        fired (e.g. the one that was waiting for this worker to start)."""
        if self.idle:
            await self.unload("idle for its ttl", soft=True)

    def _cancel_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _set_state(self, state: str) -> None:
        self.status.state = state
        self._state_changed.set()
