"""``mlxd node``: host model workers for a gateway on another machine.

The node binds one ROUTER socket on its ``tcp://`` ``listen`` address as a
CURVE server (so every byte is encrypted and plaintext peers never get
through the handshake) and runs a ZAP handler that admits only the
gateway public keys in ``allowed_clients``; any other key is refused and
logged. Each gateway connection (a DEALER, see :mod:`gateway.workers.node_link`)
is a session: its :class:`shared.protocol.NodeStart` names a model from
the node's own ``[[models]]``, and the node runs that worker with
:func:`gateway.workers.process.run_incarnation`, the very code a local
gateway uses, relaying messages both ways and finishing with
:class:`shared.protocol.NodeExited`.

A session whose gateway has sent nothing (not even
:class:`shared.protocol.NodeAlive`) for ``heartbeat_timeout`` seconds has
its worker killed, so a worker never outlives its gateway; workers also
watch the node's pid. Everything runs on one asyncio event loop, with no
MLX in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from dataclasses import dataclass, field

import zmq
import zmq.asyncio

from gateway.workers.process import Incarnation, run_incarnation
from shared.codec import DecodeError, node_codec
from shared.config import ModelConfig, NodeConfig, ServerConfig
from shared.protocol import (
    NODE_ALIVE_INTERVAL,
    PROTOCOL_VERSION,
    NodeAlive,
    NodeExited,
    NodeKill,
    NodeStart,
    NodeStarted,
    Ready,
    Shutdown,
    WorkerMessage,
)
from shared.sockets import (
    configure,
    curve_server,
    make_socket_dir,
    parse_key,
    read_key_pair,
    remove_socket_dir,
    start_authenticator,
)

log = logging.getLogger("mlxd.node")

STARTING_SILENCE = 3600.0
"""Seconds a loading worker may stay silent on the node (the gateway
applies its own, usually shorter, ``worker_start_timeout``)."""


@dataclass
class _Session:
    """One gateway session: the worker incarnation it runs."""

    identity: bytes
    model: str
    last_heard: float
    task: asyncio.Task[None] | None = None
    incarnation: Incarnation | None = None
    ready: bool = False
    pending: list[object] = field(default_factory=list)


class Node:
    """The node's socket, ZAP handler and sessions (see the module doc).

    Raises :class:`shared.sockets.CurveKeyError` from :meth:`run` when a key
    file or an allowed key is unusable.
    """

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.models: dict[str, ModelConfig] = {m.name: m for m in config.models}
        self.server = ServerConfig(log_level=config.node.log_level, log_file=config.node.log_file)
        self.sessions: dict[bytes, _Session] = {}
        self._codec = node_codec()
        self._sock: zmq.asyncio.Socket | None = None
        self._socket_dir = ""

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set, then kill every worker and return."""
        settings = self.config.node
        keys = read_key_pair(settings.public_key_file, settings.secret_key_file)
        allowed = {parse_key(k, "node.allowed_clients") for k in settings.allowed_clients}
        ctx = zmq.asyncio.Context.instance()
        auth = start_authenticator(ctx, allowed)
        self._sock = curve_server(configure(ctx.socket(zmq.ROUTER)), keys)
        self._socket_dir = make_socket_dir()
        tasks: list[asyncio.Task[None]] = []
        try:
            self._sock.bind(settings.listen)
            log.info("node listening on %s (CURVE) for %s", settings.listen, ", ".join(self.models))
            tasks = [asyncio.create_task(self._receive()), asyncio.create_task(self._watch())]
            await stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            running = [s.task for s in self.sessions.values() if s.task is not None]
            for task in running:
                task.cancel()
            for task in [*tasks, *running]:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self._sock.close(0)
            auth.stop()
            remove_socket_dir(self._socket_dir)
            log.info("node stopped")

    def _send(self, identity: bytes, message: object) -> None:
        assert self._sock is not None
        with contextlib.suppress(zmq.ZMQError):
            self._sock.send_multipart([identity, self._codec.encode(message)], flags=zmq.NOBLOCK)  # type: ignore[arg-type]

    async def _receive(self) -> None:
        assert self._sock is not None
        while True:
            frames = await self._sock.recv_multipart(copy=False)
            if len(frames) != 2:
                continue
            identity = frames[0].bytes
            try:
                message = self._codec.decode(frames[1].buffer)
            except DecodeError as exc:
                log.warning("dropped a malformed frame from a gateway: %s", exc)
                continue
            self._handle(identity, message)

    def _handle(self, identity: bytes, message: object) -> None:
        session = self.sessions.get(identity)
        if isinstance(message, NodeStart):
            if session is None:
                self._start(identity, message)
            return
        if session is None:
            return
        session.last_heard = time.monotonic()
        if isinstance(message, NodeAlive):
            return
        if isinstance(message, NodeKill):
            self._kill(session)
            return
        if session.incarnation is None:
            if isinstance(message, Shutdown):
                self._kill(session)
            else:
                session.pending.append(message)
            return
        session.incarnation.send(message)

    def _kill(self, session: _Session) -> None:
        if session.incarnation is not None:
            session.incarnation.kill()
        elif session.task is not None:
            session.task.cancel()

    def _start(self, identity: bytes, start: NodeStart) -> None:
        model = self.models.get(start.model)
        if start.protocol != PROTOCOL_VERSION:
            reason = f"the node speaks wire protocol {PROTOCOL_VERSION}, the gateway {start.protocol}"
        elif model is None:
            reason = f"model {start.model!r} is not configured on this node"
        else:
            session = _Session(identity, model.name, time.monotonic())
            self.sessions[identity] = session
            session.task = asyncio.create_task(self._run(session, model, start), name=f"node:{model.name}")
            return
        log.warning("refused a session: %s", reason)
        self._send(identity, NodeExited(reason=reason))

    async def _run(self, session: _Session, model: ModelConfig, start: NodeStart) -> None:
        identity = session.identity

        def started(incarnation: Incarnation) -> None:
            session.incarnation = incarnation
            self._send(identity, NodeStarted(pid=incarnation.pid))
            for message in session.pending:
                incarnation.send(message)
            session.pending.clear()

        def relay(message: WorkerMessage) -> None:
            if isinstance(message, Ready):
                session.ready = True
            self._send(identity, message)

        why = "cancelled"
        try:
            why = await run_incarnation(
                model,
                self.server,
                self._socket_dir,
                start.incarnation,
                on_start=started,
                on_message=relay,
                silence_limit=lambda: self.config.node.heartbeat_timeout if session.ready else STARTING_SILENCE,
                memory_limit=start.memory_limit,
                cache_limit=start.cache_limit,
            )
        finally:
            log.info("worker for %s ended (%s)", model.name, why)
            self._send(identity, NodeExited(reason=why))
            self.sessions.pop(identity, None)

    async def _watch(self) -> None:
        """Every :data:`NODE_ALIVE_INTERVAL`: tell each gateway we are here,
        and kill the workers of gateways silent for ``heartbeat_timeout``."""
        limit = self.config.node.heartbeat_timeout
        while True:
            await asyncio.sleep(NODE_ALIVE_INTERVAL)
            now = time.monotonic()
            for session in list(self.sessions.values()):
                if now - session.last_heard > limit:
                    log.warning("gateway of %s silent for %.0fs; killing its worker", session.model, limit)
                    session.last_heard = now
                    self._kill(session)
                else:
                    self._send(session.identity, NodeAlive())


def run_node(config: NodeConfig) -> int:
    """Run a node until SIGTERM or SIGINT; return the exit code (1 when a
    key is unusable or the address cannot be bound)."""
    from shared.sockets import CurveKeyError

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await Node(config).run(stop)

    try:
        asyncio.run(main())
    except (CurveKeyError, zmq.ZMQError) as exc:
        log.error("node cannot start: %s", exc)
        return 1
    return 0
