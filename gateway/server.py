"""Running the gateway: uvicorn plus mlxd's signal handling.

- SIGTERM or SIGINT: drain. New requests get 503, requests in flight may
  finish for up to ``server.drain_timeout`` seconds, then the server stops:
  what is still running ends with a terminal error, every worker is stopped
  and the process exits 0. A second signal stops at once.
- SIGHUP: reload the config file. A valid config is applied without dropping
  work (see :meth:`WorkerPool.reload`); an invalid one is refused with one
  log line and the old config stays in force.

HTTP/1.1 is spoken by :class:`gateway.http.guard.GuardedH11Protocol`,
uvicorn's h11 protocol with a header timeout and a head-size limit.

The server writes its pid to the pid file (for ``mlxd reload``) and removes
it at exit. Everything runs on the main thread's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import signal
import socket
from pathlib import Path
from typing import Any, Callable, Iterator

import uvicorn

from gateway.app import build_app
from gateway.http.guard import MAX_HEAD_BYTES, GuardedH11Protocol
from gateway.mcp.client import McpUnavailable
from gateway.metrics.loop_probe import start_probe
from gateway.workers.child_process import watch_children_without_threads
from shared.config import Config, ConfigError
from shared.config_loader import load_config
from shared.paths import default_pid_file

log = logging.getLogger("mlxd")


def pid_file_for(config: Config) -> Path:
    """The pid file of a server running ``config``."""
    configured = config.server.pid_file
    return Path(configured).expanduser() if configured else default_pid_file(config.server.port)


@contextlib.contextmanager
def pid_file(path: Path) -> Iterator[None]:
    """Hold ``path`` with this process's pid while the block runs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{os.getpid()}\n")
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if path.read_text().strip() == str(os.getpid()):
                path.unlink()


class _Server(uvicorn.Server):
    """uvicorn with mlxd's signals: drain on SIGTERM/SIGINT, reload on SIGHUP."""

    def __init__(
        self, config: uvicorn.Config, app: Any, config_path: str, loader: Callable[[], Config] | None = None
    ) -> None:
        super().__init__(config)
        self.mlxd_app = app
        self.config_path = config_path
        self.loader = loader or functools.partial(load_config, config_path)
        self._draining = False
        self._reloading = asyncio.Lock()

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        """Serve until stopped: child processes started through asyncio are
        waited for without threads
        (:func:`gateway.workers.child_process.watch_children_without_threads`),
        and the event-loop stall probe runs when ``MLXD_LOOP_STALL_LOG``
        asks for it (:mod:`gateway.metrics.loop_probe`)."""
        probe = start_probe("gateway")
        watch_children_without_threads()
        try:
            await super().serve(sockets)
        finally:
            if probe is not None:
                probe.stop()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Start listening once the app has started (its lifespan imported
        what it needs and started the pool and MCP sessions), then take
        every object made so far out of the garbage collector's sight
        (:func:`gc.freeze`): a full collection then walks only what
        requests made since, not the imported libraries, and pauses the
        event loop for far less."""
        await super().startup(sockets)
        gc.freeze()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # type: ignore[override]
        handled = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
        previous = {sig: signal.signal(sig, self._on_signal) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, sig: int, frame: object) -> None:
        loop = asyncio.get_event_loop()
        if hasattr(signal, "SIGHUP") and sig == signal.SIGHUP:
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self.reload()))
        elif self._draining:
            self.should_exit = True
        else:
            self._draining = True
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self.drain()))

    async def drain(self) -> None:
        """Stop taking requests, let in-flight ones finish, then exit."""
        pool = self.mlxd_app.state.backend
        timeout = pool.config.server.drain_timeout
        log.info("draining: waiting up to %.0fs for requests in flight", timeout)
        pool.begin_drain()
        if not await pool.wait_idle(timeout):
            log.warning("drain timeout: ending the requests still running")
            pool.end_inflight(f"the server is shutting down (drain_timeout of {timeout:g}s passed)")
        self.should_exit = True

    async def reload(self) -> tuple[bool, list[str]]:
        """Re-read the config file and apply it (or keep the old one).
        Returns whether it was applied, and one line per change made (or
        the one reason it was refused). SIGHUP and ``POST /v1/admin/reload``
        both come here. The file and the model files are read in worker
        threads; reloads run one at a time, in the order they came."""
        async with self._reloading:
            try:
                config = await asyncio.to_thread(self.loader)
            except ConfigError as exc:
                log.error("reload refused, keeping the running config: %s", exc)
                return False, [f"reload refused, keeping the running config: {exc}"]
            changes = await self.mlxd_app.state.backend.reload(config)
            try:
                changes += await self.mlxd_app.state.mcp.reload(config.mcp_servers)
            except McpUnavailable as exc:
                log.error("reload: %s", exc)
            self.mlxd_app.state.config = config
            log.info("reloaded %s: %s", self.config_path, "; ".join(changes) or "no changes")
            return True, changes


def run(config: Config, config_path: str, loader: Callable[[], Config] | None = None) -> None:
    """Serve ``config`` until drained or stopped; blocks the main thread.

    ``loader`` reads the config again on SIGHUP (default: load
    ``config_path``; the command line passes one that re-applies its
    overrides).
    """
    app = build_app(config)
    server = _Server(
        uvicorn.Config(
            app,
            host=config.server.host,
            port=config.server.port,
            log_level="warning",
            access_log=False,
            ws="none",  # no WebSocket routes: uvicorn need not import a WebSocket library at start
            timeout_keep_alive=30,
            h11_max_incomplete_event_size=MAX_HEAD_BYTES,
            http=functools.partial(GuardedH11Protocol, header_timeout=config.server.header_timeout),  # type: ignore[arg-type]
        ),
        app,
        config_path,
        loader,
    )
    app.state.reload_config = server.reload
    with pid_file(pid_file_for(config)):
        server.run()
