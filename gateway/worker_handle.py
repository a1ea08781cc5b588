"""Supervision of one model's worker process, and request routing to it.

A :class:`WorkerHandle` starts ``python -m worker`` for its model, waits for
the hello -> loaded -> ready handshake, then forwards requests to it and
dispatches its outputs to per-request queues. It notices a dead worker
(process exit) or a hung one (no message for ``heartbeat_timeout`` seconds),
ends every in-flight request with a terminal ``unavailable`` error at once,
and starts a new incarnation with exponential back-off.

Everything here runs on the gateway's event loop; sockets are
``zmq.asyncio`` sockets and the process is an asyncio subprocess, so nothing
blocks the loop. Each incarnation binds fresh socket paths, so nothing queued
for a dead worker reaches its replacement.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes.util
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field

import msgspec
import zmq
import zmq.asyncio

from gateway.errors import APIError, unavailable
from shared.codec import DecodeError, gateway_codec
from shared.config import ModelConfig, ServerConfig, encode_model_config
from shared.protocol import (
    AbortRequest,
    Failed,
    GenerateRequest,
    Heartbeat,
    Hello,
    Loaded,
    Ready,
    RequestOutput,
    Shutdown,
    StepOutputs,
    WorkerStats,
)
from shared.sockets import configure, endpoint_path, endpoints_for

log = logging.getLogger("mlxd.gateway.worker")

MAX_BACKOFF = 30.0


@dataclass
class WorkerStatus:
    """What the gateway knows about a model's worker (for /health).

    ``state``: starting, loading, ready, restarting, failed or stopped.
    """

    state: str = "starting"
    pid: int | None = None
    incarnation: int = 0
    restarts: int = 0
    context_length: int | None = None
    load_seconds: float | None = None
    blas: str | None = None
    last_error: str | None = None
    stats: WorkerStats = field(default_factory=WorkerStats)


class _Pending:
    """Outputs of one in-flight request, waiting to be read.

    ``open_choices`` counts the choices the dispatcher still expects a
    terminal output for.
    """

    __slots__ = ("queue", "incarnation", "n", "open_choices")

    def __init__(self, incarnation: int, n: int) -> None:
        self.queue: asyncio.Queue[RequestOutput] = asyncio.Queue()
        self.incarnation = incarnation
        self.n = n
        self.open_choices = n


def ends_request(output: RequestOutput) -> bool:
    """True for an output that ends its whole request (error or abort)."""
    return output.finish_reason in ("error", "abort")


class WorkerRequestStream:
    """The :class:`gateway.engine_api.RequestStream` of one request.

    Yields the request's outputs and stops after the terminal one.
    ``aclose`` before the end sends an abort to the worker.
    """

    def __init__(self, handle: "WorkerHandle", request_id: str, pending: _Pending) -> None:
        self._handle = handle
        self._request_id = request_id
        self._pending = pending
        self._open = pending.n
        self._done = False

    def __aiter__(self) -> "WorkerRequestStream":
        return self

    async def __anext__(self) -> RequestOutput:
        if self._done:
            raise StopAsyncIteration
        output = await self._pending.queue.get()
        if ends_request(output):
            self._done = True
        elif output.finish_reason is not None:
            self._open -= 1
            self._done = self._open == 0
        return output

    async def aclose(self) -> None:
        """Abort the request in the worker unless it already finished."""
        if self._done:
            return
        self._done = True
        self._handle.abort(self._request_id, self._pending)


class WorkerHandle:
    """Owns the worker process of one configured model.

    ``socket_dir`` is the gateway's private socket directory. Call
    :meth:`start` once on the running loop and :meth:`stop` at shutdown.
    """

    def __init__(self, model: ModelConfig, server: ServerConfig, socket_dir: str) -> None:
        self.model = model
        self.status = WorkerStatus()
        self._server = server
        self._socket_dir = socket_dir
        self._ctx = zmq.asyncio.Context.instance()
        self._codec = gateway_codec()
        self._inflight: dict[str, _Pending] = {}
        self._sequences = 0  # open choices of all in-flight requests
        self._push: zmq.asyncio.Socket | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._ready = asyncio.Event()

    # -- public API -------------------------------------------------------

    def start(self) -> None:
        """Start supervising (spawns the first incarnation)."""
        self._task = asyncio.create_task(self._supervise(), name=f"supervise:{self.model.name}")

    async def wait_ready(self, timeout: float) -> bool:
        """Wait until the worker is ready; False on timeout."""
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    def submit(self, request: GenerateRequest) -> WorkerRequestStream:
        """Send ``request`` to the worker and return its output stream.

        Raises:
            gateway.errors.APIError: 503 when the worker is not ready.
        """
        if self.status.state != "ready" or self._push is None:
            detail = f": {self.status.last_error}" if self.status.last_error else ""
            raise unavailable(f"model '{self.model.name}' is {self.status.state}{detail}")
        if self._sequences + request.n > self.model.max_batch_size + self.model.max_queued:
            raise APIError(
                503,
                f"model '{self.model.name}' is at capacity; retry shortly",
                code="overloaded",
                retry_after=1,
            )
        if self.model.request_timeout and request.timeout is None:
            request = msgspec.structs.replace(request, timeout=self.model.request_timeout)
        pending = _Pending(self.status.incarnation, request.n)
        self._inflight[request.request_id] = pending
        self._sequences += pending.open_choices
        self._send(request)
        return WorkerRequestStream(self, request.request_id, pending)

    def abort(self, request_id: str, pending: _Pending) -> None:
        """Forget ``request_id`` and ask its worker to drop it (if still the
        same incarnation)."""
        if self._inflight.get(request_id) is pending:
            self._retire(request_id, pending)
            if pending.incarnation == self.status.incarnation:
                self._send(AbortRequest([request_id]))

    async def stop(self, timeout: float = 5.0) -> None:
        """Ask the worker to exit, kill it after ``timeout`` s, fail what is
        still in flight, and stop supervising."""
        self._closing = True
        proc = self._proc
        if proc is not None and proc.returncode is None:
            self._send(Shutdown())
            try:
                await asyncio.wait_for(proc.wait(), timeout)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._fail_inflight("the server is shutting down")
        self.status.state = "stopped"

    # -- supervision ------------------------------------------------------

    async def _supervise(self) -> None:
        backoff = 1.0
        while not self._closing:
            started = time.monotonic()
            await self._run_incarnation()
            self._ready.clear()
            self._fail_inflight("the model worker stopped unexpectedly; retry the request")
            if self._closing:
                return
            if time.monotonic() - started > 60:
                backoff = 1.0
            self.status.restarts += 1
            if self.status.state != "failed":
                self.status.state = "restarting"
            log.warning("worker for %s exited; restarting in %.0fs", self.model.name, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)

    async def _run_incarnation(self) -> None:
        self.status.incarnation += 1
        incarnation = self.status.incarnation
        endpoints = endpoints_for(self._socket_dir, _safe(self.model.name), incarnation)
        push = configure(self._ctx.socket(zmq.PUSH))
        pull = configure(self._ctx.socket(zmq.PULL))
        try:
            push.bind(endpoints.requests)
            pull.bind(endpoints.outputs)
            self.status.state = "starting"
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "worker",
                "--worker-id", f"{_safe(self.model.name)}-{incarnation}",
                "--model-config", encode_model_config(self.model),
                "--requests", endpoints.requests,
                "--outputs", endpoints.outputs,
                "--parent-pid", str(os.getpid()),
                "--log-level", self._server.log_level,
                stdin=asyncio.subprocess.DEVNULL,
                env=worker_environment(),
                start_new_session=True,
            )
            self._proc = proc
            self._push = push
            self.status.pid = proc.pid
            log.info("started worker for %s (pid %d)", self.model.name, proc.pid)
            await self._pump(pull, proc)
        finally:
            self._push = None
            if self._proc is not None and self._proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    self._proc.kill()
                await self._proc.wait()
            push.close(0)
            pull.close(0)
            for ep in (endpoints.requests, endpoints.outputs):
                with contextlib.suppress(OSError):
                    os.unlink(endpoint_path(ep))

    async def _pump(self, pull: zmq.asyncio.Socket, proc: asyncio.subprocess.Process) -> None:
        """Dispatch the worker's messages until it exits or goes silent."""
        exited = asyncio.ensure_future(proc.wait())
        try:
            while True:
                ready = self.status.state == "ready"
                limit = self._server.heartbeat_timeout if ready else self._server.worker_start_timeout
                recv = asyncio.ensure_future(pull.recv(copy=False))
                done, _ = await asyncio.wait({recv, exited}, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
                if recv not in done:
                    recv.cancel()
                    if exited in done:
                        self.status.last_error = f"worker exited with code {proc.returncode}"
                        return
                    self.status.last_error = f"worker sent nothing for {limit:.0f}s; killed"
                    log.error("worker for %s is unresponsive; killing pid %d", self.model.name, proc.pid)
                    with contextlib.suppress(ProcessLookupError):
                        proc.send_signal(signal.SIGKILL)
                    return
                self._dispatch(recv.result().buffer)
        finally:
            exited.cancel()

    def _dispatch(self, frame: memoryview) -> None:
        try:
            message = self._codec.decode(frame)
        except DecodeError as exc:
            log.warning("dropped a malformed frame from the %s worker: %s", self.model.name, exc)
            return
        if isinstance(message, StepOutputs):
            for output in message.outputs:
                pending = self._inflight.get(output.request_id)
                if pending is None:
                    continue
                pending.queue.put_nowait(output)
                if ends_request(output):
                    self._retire(output.request_id, pending)
                elif output.finish_reason is not None:
                    pending.open_choices -= 1
                    self._sequences -= 1
                    if pending.open_choices == 0:
                        del self._inflight[output.request_id]
        elif isinstance(message, Heartbeat):
            self.status.stats = message.stats
        elif isinstance(message, Hello):
            self.status.state = "loading"
        elif isinstance(message, Loaded):
            self.status.context_length = message.context_length
            self.status.load_seconds = message.load_seconds
            self.status.blas = message.blas
            log.info(
                "model %s loaded in %.1fs from %s (BLAS: %s)",
                self.model.name, message.load_seconds, message.model_path, message.blas,
            )
        elif isinstance(message, Ready):
            self.status.state = "ready"
            self.status.last_error = None
            self._ready.set()
            log.info("model %s is ready", self.model.name)
        elif isinstance(message, Failed):
            self.status.state = "failed"
            self.status.last_error = message.message
            log.error("model %s failed to load: %s", self.model.name, message.message)

    def _send(self, message: object) -> None:
        push = self._push
        if push is None:
            return
        try:
            push.send(self._codec.encode(message), flags=zmq.NOBLOCK)  # type: ignore[arg-type]
        except zmq.ZMQError as exc:
            log.warning("could not send to the %s worker: %s", self.model.name, exc)

    def _retire(self, request_id: str, pending: _Pending) -> None:
        """Stop tracking a request and give back its open choices."""
        del self._inflight[request_id]
        self._sequences -= pending.open_choices
        pending.open_choices = 0

    def _fail_inflight(self, message: str) -> None:
        inflight, self._inflight = self._inflight, {}
        self._sequences = 0
        for request_id, pending in inflight.items():
            pending.queue.put_nowait(
                RequestOutput(
                    request_id=request_id,
                    finish_reason="error",
                    error=message,
                    error_kind="unavailable",
                )
            )


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:40]


def worker_environment() -> dict[str, str]:
    """The environment for a worker process.

    On Linux, when the system has OpenBLAS (Debian's libopenblas0-pthread)
    and ``MLXD_BLAS`` is not ``builtin``, it is preloaded so MLX's CPU
    matrix products use it instead of the reference BLAS (tens of times
    faster). Nothing changes on macOS.
    """
    env = dict(os.environ)
    if sys.platform.startswith("linux") and env.get("MLXD_BLAS", "auto") != "builtin":
        lib = ctypes.util.find_library("openblas")
        if lib:
            env["LD_PRELOAD"] = " ".join(filter(None, [env.get("LD_PRELOAD"), lib]))
    return env
