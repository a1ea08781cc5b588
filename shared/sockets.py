"""ZeroMQ socket helpers shared by the gateway and the worker.

Each worker incarnation talks to the gateway over two IPC sockets: the
gateway binds a PUSH socket (requests to the worker) and a PULL socket
(outputs from the worker); the worker connects the opposite ends. Both
sides open their ends with :func:`open_worker_link` and delete the socket
files with :func:`remove_socket_files`. Socket files
live in a per-gateway directory that only the current user can read
(mode 0700), so other local users cannot reach a worker. Every socket is
created with ``linger=0`` so closing never blocks, and with a maximum
message size so an oversized frame is dropped by ZeroMQ before decoding.

Between machines (a gateway and an ``mlxd node``) the sockets are ``tcp://``
and always use ZeroMQ's CURVE mechanism: :func:`curve_server` /
:func:`curve_client` set the keys on a socket made by :func:`configure`
before it binds or connects, :func:`start_authenticator` runs the node's
ZAP handler that accepts only listed client keys, and :func:`write_key_pair`
/ :func:`read_key` keep key pairs in files (secret keys readable by the
owner only).

A tensor-parallel group's ranks also share a small wake-up link
(:func:`open_wake_link`, plaintext tcp between the group's own hosts).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import zmq
import zmq.auth.asyncio
import zmq.utils.z85

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


def open_worker_link(
    ctx: zmq.Context,
    endpoints: Endpoints,
    side: Literal["gateway", "worker"],
    *,
    send_context: zmq.Context | None = None,
) -> tuple[zmq.Socket, zmq.Socket]:
    """Open ``side``'s ends of one worker incarnation's two sockets and
    return them as ``(send, receive)``, both made by :func:`configure`.
    The send socket comes from ``send_context`` when given (a worker's
    output socket has a context of its own, so that :func:`flush_and_close`
    can deliver its last frames while the request socket is still open).

    The gateway binds a PUSH socket to ``endpoints.requests`` and a PULL
    socket to ``endpoints.outputs``; the worker connects a PULL socket to
    ``endpoints.requests`` and a PUSH socket to ``endpoints.outputs``. The
    sockets are of ``ctx``'s kind (``zmq.asyncio`` sockets from an asyncio
    context). The caller closes them.

    Raises:
        zmq.ZMQError: a bind or connect failed; both sockets are then
            closed (and, on the gateway side, the socket files removed).
    """
    send = configure((send_context or ctx).socket(zmq.PUSH))
    receive = configure(ctx.socket(zmq.PULL))
    try:
        if side == "gateway":
            send.bind(endpoints.requests)
            receive.bind(endpoints.outputs)
        else:
            receive.connect(endpoints.requests)
            send.connect(endpoints.outputs)
    except BaseException:
        send.close(0)
        receive.close(0)
        if side == "gateway":
            remove_socket_files(endpoints)
        raise
    return send, receive


def flush_and_close(sock: zmq.Socket, seconds: float) -> None:
    """Close ``sock`` once the frames it queued are delivered, waiting at
    most ``seconds`` for that, and terminate its context, which must hold
    no other open socket (or this waits for that socket to close too).

    A plain close hands queued frames to ZeroMQ's I/O thread and returns at
    once: a process that exits right after it (``os._exit``, the end of a
    dying worker) loses whatever that thread had not written yet, which on
    a busy machine is often all of it. Terminating the context is the one
    call that waits for the writes (up to the linger set here)."""
    context = sock.context
    sock.close(linger=int(seconds * 1000))
    context.term()


def open_wake_link(ctx: zmq.Context, endpoint: str, side: Literal["leader", "follower"]) -> zmq.Socket:
    """Open one end of a tensor-parallel group's wake-up link on ``endpoint``
    (``tcp://address:port``, rank 0's address) and return it (made by
    :func:`configure`; the caller closes it).

    Rank 0 (``leader``) binds an XPUB socket that reports each subscription
    (one frame per follower that connected, see
    :meth:`worker.tensor_parallel.lockstep.Lockstep.await_followers`); each other rank
    (``follower``) connects a SUB socket subscribed to everything. The
    frames are empty: they only tell a waiting rank that a step plan is
    coming over the group itself, so it can sleep here instead of spinning
    in MLX's collective. Plaintext, like the group's own traffic: the link
    between ranks must be trusted.

    Raises:
        zmq.ZMQError: the bind or connect failed (the socket is closed).
    """
    sock = configure(ctx.socket(zmq.XPUB if side == "leader" else zmq.SUB))
    try:
        if side == "leader":
            sock.setsockopt(zmq.XPUB_VERBOSE, 1)
            sock.bind(endpoint)
        else:
            sock.setsockopt(zmq.SUBSCRIBE, b"")
            sock.connect(endpoint)
    except BaseException:
        sock.close(0)
        raise
    return sock


def remove_socket_files(endpoints: Endpoints, *, directory: bool = False) -> None:
    """Delete the socket files of ``endpoints``; with ``directory``, also
    their directory when that is left empty (a worker whose gateway is gone
    does this). Never raises."""
    paths = [endpoint_path(endpoints.requests), endpoint_path(endpoints.outputs)]
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)
    if directory:
        for folder in {os.path.dirname(path) for path in paths}:
            with contextlib.suppress(OSError):
                os.rmdir(folder)


# -- CURVE (tcp between machines) ---------------------------------------------

log = logging.getLogger("mlxd.sockets")

KEY_LENGTH = 40
"""Length of a Z85-encoded CURVE key."""


class CurveKeyError(ValueError):
    """A CURVE key file is missing, unreadable, too open or malformed."""


@dataclass(frozen=True)
class KeyPair:
    """A CURVE key pair, both halves Z85-encoded (40 ASCII bytes)."""

    public: bytes
    secret: bytes


def _check_key(key: bytes, origin: str) -> bytes:
    key = key.strip()
    if len(key) != KEY_LENGTH:
        raise CurveKeyError(f"{origin}: not a Z85 CURVE key (expected {KEY_LENGTH} characters)")
    try:
        zmq.utils.z85.decode(key)
    except (ValueError, KeyError):
        raise CurveKeyError(f"{origin}: not a Z85 CURVE key") from None
    return key


def parse_key(text: str, origin: str = "key") -> bytes:
    """Return the Z85 CURVE key in ``text`` as bytes.

    Raises:
        CurveKeyError: ``text`` is not a 40-character Z85 key.
    """
    return _check_key(text.encode("ascii", "replace"), origin)


def write_key_pair(directory: str | os.PathLike[str], name: str) -> tuple[Path, Path]:
    """Generate a CURVE key pair with :func:`zmq.curve_keypair` and write it
    as ``NAME.key`` (the secret key, mode 0600, created exclusively so an
    existing key is never overwritten) and ``NAME.pub`` (the public key,
    mode 0644) in ``directory`` (created 0700 if missing). Returns
    ``(public_path, secret_path)``.

    Raises:
        FileExistsError: either file already exists.
    """
    folder = Path(directory).expanduser()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    public_path, secret_path = folder / f"{name}.pub", folder / f"{name}.key"
    for path in (public_path, secret_path):
        if path.exists():
            raise FileExistsError(f"{path} already exists; remove it first to make a new key pair")
    public, secret = zmq.curve_keypair()
    fd = os.open(secret_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(secret + b"\n")
    fd = os.open(public_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(public + b"\n")
    return public_path, secret_path


def read_key(path: str | os.PathLike[str], *, secret: bool = False) -> bytes:
    """Read one Z85 key from ``path``. A ``secret`` key file must not be
    readable by group or others.

    Raises:
        CurveKeyError: the file cannot be read, is too open, or holds no key.
    """
    origin = str(path)
    try:
        p = Path(path).expanduser()
        mode = p.stat().st_mode
        data = p.read_bytes()
    except OSError as exc:
        raise CurveKeyError(f"{origin}: cannot read: {exc.strerror}") from None
    if secret and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CurveKeyError(f"{origin}: a secret key file must be readable by its owner only (chmod 600)")
    return _check_key(data, origin)


def read_key_pair(public_path: str, secret_path: str) -> KeyPair:
    """Read a key pair written by :func:`write_key_pair` (see :func:`read_key`)."""
    return KeyPair(public=read_key(public_path), secret=read_key(secret_path, secret=True))


def curve_server(sock: zmq.Socket, keys: KeyPair) -> zmq.Socket:
    """Make ``sock`` (from :func:`configure`, not yet bound) a CURVE server
    with ``keys``: peers must complete a CURVE handshake (a plaintext
    client is refused) and everything is encrypted. Returns the socket."""
    sock.curve_secretkey = keys.secret
    sock.curve_publickey = keys.public
    sock.curve_server = True
    return sock


RECONNECT_MS = (500, 5000)
"""First and longest wait (ms) between a CURVE client's reconnection
attempts, so a refused or absent node is not hammered."""


def curve_client(sock: zmq.Socket, keys: KeyPair, server_public: bytes) -> zmq.Socket:
    """Make ``sock`` (from :func:`configure`, not yet connected) a CURVE
    client of the server whose public key is ``server_public``. Returns the
    socket. A connection to a server with another key fails its handshake;
    reconnection attempts back off as :data:`RECONNECT_MS` says."""
    sock.curve_secretkey = keys.secret
    sock.curve_publickey = keys.public
    sock.curve_serverkey = server_public
    sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MS[0])
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_MS[1])
    return sock


class _AllowList:
    """ZAP credentials provider: accepts exactly the listed client keys and
    logs every refusal with the refused key."""

    def __init__(self, allowed: set[bytes]) -> None:
        self.allowed = allowed

    def callback(self, domain: str, key: bytes) -> bool:
        """True when ``key`` (Z85, as pyzmq passes it) is allowed (called by the ZAP
        handler on the event loop for each CURVE handshake)."""
        if key in self.allowed:
            return True
        log.warning("refused a connection from an unlisted CURVE key %s", key.decode("ascii", "replace"))
        return False


def start_authenticator(ctx: zmq.asyncio.Context, allowed: set[bytes]) -> zmq.auth.asyncio.AsyncioAuthenticator:
    """Start the ZAP handler of ``ctx`` (an asyncio context; it runs on the
    running event loop) accepting only CURVE clients whose Z85 public key
    is in ``allowed``. The caller stops it with ``.stop()``."""
    auth = zmq.auth.asyncio.AsyncioAuthenticator(ctx)
    auth.start()
    auth.configure_curve_callback(domain="*", credentials_provider=_AllowList(allowed))
    return auth
