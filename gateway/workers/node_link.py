"""The gateway's end of an ``mlxd node``: worker incarnations on another Mac.

A :class:`NodeLink` stands for one ``[[nodes]]`` entry. Its
:meth:`NodeLink.run_incarnation` has the contract of
:func:`gateway.workers.process.run_incarnation`, so a
:class:`gateway.workers.handle.WorkerHandle` supervises a remote worker
exactly as a local one (heartbeats, cancellation, drain, reload, restart
with back-off): each incarnation is one session, a DEALER socket connected
to the node's ROUTER over ``tcp://`` with CURVE (the node's public key
from the config, the gateway's key pair from ``server.curve_*_key_file``),
opened with :class:`shared.protocol.NodeStart` and carrying the ordinary
wire messages after it.

The session ends (and the handle fails the requests in flight and restarts
it) when the node reports the worker's exit, when the worker is silent
longer than the handle allows, or when the node itself has sent nothing,
not even :class:`shared.protocol.NodeAlive`, for ``heartbeat_timeout``
seconds (a node that disappeared or refused our key). Runs on the gateway's
event loop; nothing blocks it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

import zmq
import zmq.asyncio

from gateway.workers.process import Incarnation
from shared.codec import DecodeError, link_codec
from shared.config import ModelConfig, NodeEntry, ServerConfig
from shared.protocol import (
    NODE_ALIVE_INTERVAL,
    NodeAlive,
    NodeExited,
    NodeKill,
    NodeStart,
    NodeStarted,
    WorkerMessage,
)
from shared.sockets import KeyPair, configure, curve_client, parse_key

log = logging.getLogger("mlxd.gateway.node")


class NodeLink:
    """One configured node: where it is, its public key, and our keys.

    Raises :class:`shared.sockets.CurveKeyError` at construction when the
    node's public key is malformed.
    """

    def __init__(self, entry: NodeEntry, keys: KeyPair) -> None:
        self.name = entry.name
        self.address = entry.address
        self.server_key = parse_key(entry.public_key, f"node {entry.name!r} public_key")
        self.keys = keys

    async def run_incarnation(
        self,
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
        """Run incarnation ``number`` of ``model`` on this node until it
        ends; same contract as :func:`gateway.workers.process.run_incarnation`
        (``socket_dir`` is unused: nothing local is created). ``on_start``
        gets the worker's pid on the node. Returns why it ended."""
        del socket_dir
        ctx = zmq.asyncio.Context.instance()
        sock = curve_client(configure(ctx.socket(zmq.DEALER)), self.keys, self.server_key)
        codec = link_codec()

        def send(message: object) -> bool:
            try:
                sock.send(codec.encode(message), flags=zmq.NOBLOCK)  # type: ignore[arg-type]
                return True
            except zmq.ZMQError as exc:
                log.warning("could not send to node %s: %s", self.name, exc)
                return False

        alive = asyncio.create_task(self._keep_alive(send))
        ended = False
        try:
            sock.connect(self.address)
            send(NodeStart(model=model.name, incarnation=number, memory_limit=memory_limit, cache_limit=cache_limit))
            why = await self._pump(sock, codec, send, model.name, number, on_start, on_message, silence_limit, server)
            ended = why.startswith("on node")
            return why
        finally:
            alive.cancel()
            if not ended:
                send(NodeKill())  # the node also kills it once we fall silent
            sock.close(linger=500)

    async def _keep_alive(self, send: Callable[[object], bool]) -> None:
        while True:
            await asyncio.sleep(NODE_ALIVE_INTERVAL)
            send(NodeAlive())

    async def _pump(
        self,
        sock: zmq.asyncio.Socket,
        codec: object,
        send: Callable[[object], bool],
        name: str,
        number: int,
        on_start: Callable[[Incarnation], None],
        on_message: Callable[[WorkerMessage], None],
        silence_limit: Callable[[], float],
        server: ServerConfig,
    ) -> str:
        """Dispatch the session's messages until it ends; return why."""
        now = time.monotonic()
        heard_node = heard_worker = now
        started = False
        while True:
            now = time.monotonic()
            node_left = server.heartbeat_timeout - (now - heard_node)
            worker_left = silence_limit() - (now - heard_worker)
            if node_left <= 0:
                what = "sent nothing" if started else "did not answer (down, unreachable, or refusing our key)"
                log.error("node %s %s for %.0fs; giving up on %s", self.name, what, server.heartbeat_timeout, name)
                return f"node {self.name} {what} for {server.heartbeat_timeout:.0f}s"
            if worker_left <= 0:
                log.error("worker for %s on node %s is unresponsive; killing it", name, self.name)
                send(NodeKill())
                return f"worker on node {self.name} sent nothing for {silence_limit():.0f}s; killed"
            try:
                frame = await asyncio.wait_for(sock.recv(copy=False), min(node_left, worker_left))
            except TimeoutError:
                continue
            heard_node = time.monotonic()
            try:
                message = codec.decode(frame.buffer)  # type: ignore[attr-defined]
            except DecodeError as exc:
                log.warning("dropped a malformed frame from node %s: %s", self.name, exc)
                continue
            if isinstance(message, NodeAlive):
                continue
            if isinstance(message, NodeExited):
                return f"on node {self.name}: {message.reason}"
            heard_worker = heard_node
            if isinstance(message, NodeStarted):
                started = True
                log.info("node %s started worker for %s (pid %d)", self.name, name, message.pid)

                def kill() -> None:
                    send(NodeKill())

                on_start(Incarnation(number, message.pid, send, kill))
                continue
            on_message(message)
