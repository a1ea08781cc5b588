"""ZeroMQ socket helpers shared by the gateway and the worker.

Each worker incarnation talks to the gateway over two IPC sockets: the
gateway binds a PUSH socket (requests to the worker) and a PULL socket
(outputs from the worker); the worker connects the opposite ends. Socket files
live in a per-gateway directory that only the current user can read
(mode 0700), so other local users cannot reach a worker. Every socket is
created with ``linger=0`` so closing never blocks, and with a maximum
message size so an oversized frame is dropped by ZeroMQ before decoding.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

import zmq

from shared.codec import MAX_FRAME_BYTES


@dataclass(frozen=True)
class Endpoints:
    """The two IPC addresses of one worker incarnation.

    ``requests``: gateway PUSH (bind) -> worker PULL (connect).
    ``outputs``: worker PUSH (connect) -> gateway PULL (bind).
    """

    requests: str
    outputs: str


def make_socket_dir() -> str:
    """Create and return a fresh private directory (0700) for socket files.

    The path is kept short because IPC socket paths are limited to about
    100 bytes on macOS. The caller removes it with :func:`remove_socket_dir`.
    """
    base = "/tmp" if os.path.isdir("/tmp") else None
    path = tempfile.mkdtemp(prefix="mlxd-", dir=base)
    os.chmod(path, 0o700)
    return path


def remove_socket_dir(path: str) -> None:
    """Remove a directory made by :func:`make_socket_dir`; never raises."""
    shutil.rmtree(path, ignore_errors=True)


def endpoints_for(socket_dir: str, worker_key: str, incarnation: int) -> Endpoints:
    """Return fresh endpoints for one worker incarnation.

    A new incarnation gets new paths so that nothing queued for a dead
    worker can reach its replacement.
    """
    stem = os.path.join(socket_dir, f"{worker_key}-{incarnation}")
    return Endpoints(requests=f"ipc://{stem}.req", outputs=f"ipc://{stem}.out")


def configure(sock: zmq.Socket) -> zmq.Socket:
    """Apply the options every mlxd socket uses and return the socket."""
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    return sock


def endpoint_path(endpoint: str) -> str:
    """Return the filesystem path of an ``ipc://`` endpoint."""
    return endpoint.removeprefix("ipc://")
