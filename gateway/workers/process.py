"""One incarnation of a model's worker process, seen from the gateway.

:func:`run_incarnation` binds fresh IPC sockets, starts ``python -m worker``
and hands every decoded message to a callback until the process exits or
falls silent for longer than allowed (then it is killed). It always leaves
no process and no socket file behind. Runs on the gateway's event loop; the
process is started in a worker thread and awaited on the loop
(:mod:`gateway.workers.child_process`), the sockets are ``zmq.asyncio`` sockets and
the worker's environment is made in a worker thread, so nothing blocks the
loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes.util
import hashlib
import logging
import os
import signal
import sys
from dataclasses import dataclass
from typing import Callable

import zmq
import zmq.asyncio

from gateway.workers.child_process import ChildProcess, spawn
from shared.codec import DecodeError, gateway_codec
from shared.config import ModelConfig, ServerConfig, encode_model_config
from shared.protocol import EXIT_THREAD_DIED, WorkerMessage
from shared.sockets import endpoints_for, open_worker_link, remove_socket_files

log = logging.getLogger("mlxd.gateway.worker")


@dataclass
class Incarnation:
    """A started worker process: its number, pid and request socket.

    ``send`` encodes and queues a message for the worker without blocking;
    it returns False when the socket is gone. ``kill`` ends the process at
    once (SIGKILL; the incarnation then ends as if it had died).
    """

    number: int
    pid: int
    send: Callable[[object], bool]
    kill: Callable[[], None]


def worker_key(name: str) -> str:
    """A file-name-safe key unique to model ``name``: at most 24 characters
    of the name (``/`` and ``:`` mapped to ``_``) and 8 hex digits of a
    hash of the exact name, so ``org/a`` and ``org_a``, or two long names
    with the same start, never share socket paths. Short enough that the
    socket paths stay well under the Unix socket path limit (104 bytes
    on macOS)."""
    readable = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:24]
    return f"{readable}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def worker_environment() -> dict[str, str]:
    """The environment for a worker process.

    On Linux, when the system has OpenBLAS (Debian's libopenblas0-pthread)
    and ``MLXD_BLAS`` is not ``builtin``, it is preloaded so MLX's CPU
    matrix products use it instead of the reference BLAS (tens of times
    faster). Nothing changes on macOS. Blocking (finding the library may
    run ``ldconfig``): call it off the event loop.
    """
    env = dict(os.environ)
    if sys.platform.startswith("linux") and env.get("MLXD_BLAS", "auto") != "builtin":
        lib = ctypes.util.find_library("openblas")
        if lib:
            env["LD_PRELOAD"] = " ".join(filter(None, [env.get("LD_PRELOAD"), lib]))
    return env


async def run_incarnation(
    model: ModelConfig,
    server: ServerConfig,
    socket_dir: str,
    number: int,
    *,
    on_start: Callable[[Incarnation], None],
    on_message: Callable[[WorkerMessage], None],
    silence_limit: Callable[[], float],
    memory_limit: int = 0,
    cache_limit: int | None = None,
) -> str:
    """Run worker incarnation ``number`` of ``model`` until it ends.

    ``on_start`` is called once the process exists; ``on_message`` for every
    valid message (malformed frames are logged and dropped);
    ``silence_limit`` gives the seconds of silence tolerated right now (it
    changes once the worker is ready). ``memory_limit`` and ``cache_limit``
    are the worker's MLX limits in bytes (0 and None: MLX's defaults).
    Returns why it ended, one line.
    """
    ctx = zmq.asyncio.Context.instance()
    key = worker_key(model.name)
    endpoints = endpoints_for(socket_dir, key, number)
    push, pull = open_worker_link(ctx, endpoints, "gateway")
    codec = gateway_codec()
    proc: ChildProcess | None = None
    env = await asyncio.to_thread(worker_environment)  # finding OpenBLAS runs `ldconfig -p`

    def send(message: object) -> bool:
        try:
            push.send(codec.encode(message), flags=zmq.NOBLOCK)  # type: ignore[arg-type]
            return True
        except zmq.ZMQError as exc:
            log.warning("could not send to the %s worker: %s", model.name, exc)
            return False

    try:
        proc = await spawn(
            [
                sys.executable,
                "-m",
                # a tensor-parallel group: worker.tensor_parallel.launch runs mlx.launch, one `python -m worker` per rank
                *(
                    ["worker.tensor_parallel.launch", "--parent-pid", str(os.getpid()), "--"]
                    if model.tensor_parallel > 1
                    else ["worker"]
                ),
                "--worker-id",
                f"{key}-{number}",
                "--model-config",
                encode_model_config(model),
                "--requests",
                endpoints.requests,
                "--outputs",
                endpoints.outputs,
                "--parent-pid",
                str(os.getpid()),
                "--log-level",
                server.log_level,
                *(["--log-file", server.log_file] if server.log_file else []),
                *(["--memory-limit", str(memory_limit)] if memory_limit else []),
                *(["--cache-limit", str(cache_limit)] if cache_limit is not None else []),
            ],
            env,
        )
        log.info("started worker for %s (pid %d)", model.name, proc.pid)
        started = proc

        def kill() -> None:
            if started.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    started.kill()

        on_start(Incarnation(number, proc.pid, send, kill))
        return await _pump(pull, proc, codec, on_message, silence_limit, model.name)
    finally:
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        push.close(0)
        pull.close(0)
        remove_socket_files(endpoints)


EXIT_DRAIN_SECONDS = 0.2
"""How long the gateway keeps reading a worker's socket after the process
exited, once nothing more arrives (frames written just before the exit)."""

DYING_DRAIN_SECONDS = 2.0
"""The same after an exit with :data:`shared.protocol.EXIT_THREAD_DIED`:
that worker wrote every running request's error before exiting, and on a
busy machine this process's ZeroMQ thread may not run at once to read
them; a restart waits this much longer, the requests already answered do
not."""


async def _drain(
    pull: zmq.asyncio.Socket,
    codec: object,
    on_message: Callable[[WorkerMessage], None],
    name: str,
    silence: float = EXIT_DRAIN_SECONDS,
) -> None:
    """Dispatch the frames an exited worker left in the socket: read until
    none arrives for ``silence`` seconds. A dying worker sends each
    request's error and waits for the frames to be written before it
    exits, so the exit can be seen first while those frames are still being
    read; without this the gateway would replace them with its own error."""
    while True:
        try:
            frame = await asyncio.wait_for(pull.recv(copy=False), silence)
        except TimeoutError:
            return
        try:
            message = codec.decode(frame.buffer)  # type: ignore[attr-defined]
        except DecodeError as exc:
            log.warning("dropped a malformed frame from the %s worker: %s", name, exc)
            continue
        on_message(message)


async def _pump(
    pull: zmq.asyncio.Socket,
    proc: ChildProcess,
    codec: object,
    on_message: Callable[[WorkerMessage], None],
    silence_limit: Callable[[], float],
    name: str,
) -> str:
    """Dispatch the worker's messages until it exits or goes silent."""
    exited = asyncio.ensure_future(proc.wait())
    try:
        while True:
            limit = silence_limit()
            recv = asyncio.ensure_future(pull.recv(copy=False))
            done, _ = await asyncio.wait({recv, exited}, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
            if recv not in done:
                recv.cancel()
                if exited in done:
                    dying = proc.returncode == EXIT_THREAD_DIED
                    await _drain(pull, codec, on_message, name, DYING_DRAIN_SECONDS if dying else EXIT_DRAIN_SECONDS)
                    return f"worker exited with code {proc.returncode}"
                log.error("worker for %s is unresponsive; killing pid %d", name, proc.pid)
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGKILL)
                return f"worker sent nothing for {limit:.0f}s; killed"
            frame = recv.result().buffer
            try:
                message = codec.decode(frame)  # type: ignore[attr-defined]
            except DecodeError as exc:
                log.warning("dropped a malformed frame from the %s worker: %s", name, exc)
                continue
            on_message(message)
    finally:
        exited.cancel()
