"""Sessions with the configured MCP servers, through the official ``mcp`` SDK.

:class:`McpHub` owns one :class:`McpConnection` per ``[[mcp_servers]]`` entry.
Each connection keeps one MCP session open in a background asyncio task
(the SDK's transports must be entered and left in one task): it starts the
stdio subprocess or opens the streamable-HTTP session, lists the tools,
then waits. The sessions live on an event loop of their own, in one thread
(:class:`SessionLoop`), never on the gateway's: the SDK starts a stdio
server with asyncio's ``subprocess_exec``, whose fork and exec block the
calling loop until the child runs (over 150 ms measured on a busy
machine). The hub's coroutines are awaited on the gateway's loop and run
their work on the sessions' loop. When the session breaks (a stdio
server that died, a connection that closed), the task reconnects after a
back-off that doubles per consecutive failure, up to the configured maximum.
An idle session pings its server every :data:`PING_INTERVAL` seconds, so a
server that died between calls is restarted before the next one.

Calls (:meth:`McpHub.call`) run on the event loop as awaitables and never
block it: each waits for a slot of the server's concurrency limit, is bounded
by ``call_timeout`` and returns a :class:`CallOutcome` (never raises for a
tool, protocol, transport or timeout failure). Only a transport failure
restarts the session; a JSON-RPC error reply fails that one call. Arguments are validated against the
tool's input schema first. Every call logs one audit line on
``mlxd.gateway.mcp.audit``: server, tool, duration, outcome; the argument
values only at debug level.

The ``mcp`` package is imported only when a server is configured; without it
:meth:`McpHub.start` raises :class:`McpUnavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from shared.config import McpServerConfig

log = logging.getLogger("mlxd.gateway.mcp")
audit = logging.getLogger("mlxd.gateway.mcp.audit")


PING_INTERVAL = 15.0
"""Seconds of idleness after which a session pings its server, so a server
that died between calls is noticed (and restarted) before the next call."""


class McpUnavailable(Exception):
    """MCP servers are configured but the ``mcp`` package is missing."""


@dataclass(frozen=True)
class McpTool:
    """One tool of a configured server, as its ``tools/list`` describes it."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The tool as ``GET /v1/mcp/tools`` reports it."""
        return {
            "server": self.server,
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "annotations": self.annotations,
        }


@dataclass(frozen=True)
class CallOutcome:
    """The end of one tool call.

    ``outcome``: ``ok``, ``tool_error`` (the tool ran and reported an
    error), ``invalid_arguments``, ``unknown_tool``, ``timeout``,
    ``protocol_error`` (the server answered the call with a JSON-RPC error,
    or with a result the SDK rejects, such as structured content that breaks
    the tool's output schema; the session stays open) or ``unavailable``
    (the server is down or the session broke). ``text``: the result's text
    content joined, or the error message; ``content``: the result's content
    blocks as JSON; ``code``: the JSON-RPC error code of a
    ``protocol_error`` answered by the server (None when the SDK rejected
    the result itself).
    """

    outcome: str
    text: str
    content: list[dict[str, Any]] = field(default_factory=list)
    structured: dict[str, Any] | None = None
    code: int | None = None

    @property
    def ok(self) -> bool:
        """Whether the tool ran and succeeded."""
        return self.outcome == "ok"


class McpConnection:
    """One configured server: its session task, tools and call limit.

    Lives on one event loop (the hub's :class:`SessionLoop`); its
    coroutines and :meth:`start` run there. ``tools`` (the last listing,
    filtered by ``allowed_tools``; empty while the server is down),
    ``error``, ``config`` and :attr:`connected` may be read from any
    thread.
    """

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.tools: dict[str, McpTool] = {}
        self.error: str | None = None
        self._session: Any = None
        self._ready = asyncio.Event()
        self._broken = asyncio.Event()
        self._stopping = asyncio.Event()
        self._relist = asyncio.Event()
        self._slots = asyncio.Semaphore(config.max_concurrency)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the session task (returns at once)."""
        self._task = asyncio.create_task(self._run(), name=f"mcp:{self.config.name}")

    async def stop(self) -> None:
        """Close the session (and end a stdio server) and wait for the task."""
        self._stopping.set()
        self._broken.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 5.0)
            except Exception:  # noqa: BLE001 - best effort at shutdown (timeout included)
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task

    @property
    def connected(self) -> bool:
        """Whether the session is up (initialized and listed)."""
        return self._ready.is_set() and self._session is not None

    def relist(self) -> None:
        """Ask the session task to list the tools again."""
        self._relist.set()

    async def wait_ready(self, timeout: float) -> bool:
        """Wait until the session is up; False after ``timeout`` seconds."""
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def _run(self) -> None:
        """Connect, list, serve until broken; reconnect with back-off."""
        backoff = self.config.restart_backoff
        while not self._stopping.is_set():
            started = time.monotonic()
            try:
                await self._session_once()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - the SDK raises exception groups
                self.error = _describe(exc)
                log.warning("mcp server %s: session ended: %s", self.config.name, self.error)
            self._ready.clear()
            self._session = None
            self.tools = {}
            if self._stopping.is_set():
                return
            if time.monotonic() - started > 2 * self.config.max_restart_backoff:
                backoff = self.config.restart_backoff
            log.info("mcp server %s: reconnecting in %.1fs", self.config.name, backoff)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), backoff)
            backoff = min(backoff * 2, self.config.max_restart_backoff)

    async def _session_once(self) -> None:
        """One session's life: open, initialize, list, then wait for a
        break, a stop or a re-list request."""
        from mcp import ClientSession

        self._broken.clear()
        async with contextlib.AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport())
            session = await stack.enter_async_context(ClientSession(read, write))
            await asyncio.wait_for(session.initialize(), self.config.connect_timeout)
            await self._list(session)
            self._session = session
            self.error = None
            self._ready.set()
            log.info("mcp server %s: connected, %d tools", self.config.name, len(self.tools))
            while not self._broken.is_set():
                waits = [asyncio.ensure_future(self._broken.wait()), asyncio.ensure_future(self._relist.wait())]
                done, _ = await asyncio.wait(waits, timeout=PING_INTERVAL, return_when=asyncio.FIRST_COMPLETED)
                for w in waits:
                    w.cancel()
                if self._broken.is_set():
                    break
                if self._relist.is_set():
                    self._relist.clear()
                    await self._list(session)
                elif not done:  # idle: make sure the server is still there
                    await asyncio.wait_for(session.send_ping(), self.config.connect_timeout)
            if not self._stopping.is_set():
                raise ConnectionError(self.error or "session broken")

    def _transport(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """The SDK transport for this server's config."""
        cfg = self.config
        if cfg.command:
            from mcp.client.stdio import StdioServerParameters, stdio_client

            params = StdioServerParameters(
                command=cfg.command, args=list(cfg.args), env=dict(cfg.env) or None, cwd=cfg.cwd or None
            )
            return stdio_client(params, errlog=sys.stderr)
        return _http_transport(cfg)

    async def _list(self, session: Any) -> None:
        """List the tools (all pages), keeping the allowed ones."""
        tools: dict[str, McpTool] = {}
        cursor = None
        for _ in range(100):
            from mcp_types import PaginatedRequestParams

            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            result = await asyncio.wait_for(session.list_tools(params=params), self.config.connect_timeout)
            for tool in result.tools:
                if self.config.allowed_tools and tool.name not in self.config.allowed_tools:
                    continue
                annotations = tool.annotations.model_dump(exclude_none=True) if tool.annotations else None
                tools[tool.name] = McpTool(
                    self.config.name, tool.name, tool.description or "", dict(tool.input_schema), annotations
                )
            cursor = result.next_cursor
            if not cursor:
                break
        self.tools = tools

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallOutcome:
        """Run ``tool`` with ``arguments`` (already validated). Waits for a
        concurrency slot; bounded by ``call_timeout`` (slot wait included).

        Only a transport failure (the connection closed, the stream broke)
        ends the session, making it reconnect, and answers ``unavailable``.
        A JSON-RPC error reply and a result the SDK rejects are a
        ``protocol_error`` of this call alone: the session, and the other
        calls in flight on it, carry on.
        """
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        try:
            async with asyncio.timeout(self.config.call_timeout):
                async with self._slots:
                    session = self._session
                    if session is None:
                        return CallOutcome("unavailable", f"MCP server {self.config.name!r} is not connected")
                    result = await session.call_tool(tool, arguments)
        except TimeoutError:
            return CallOutcome("timeout", f"MCP tool {tool!r} timed out after {self.config.call_timeout:g}s")
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                return CallOutcome("timeout", f"MCP tool {tool!r} timed out: {exc.message}")
            if exc.code != CONNECTION_CLOSED:
                message = f"MCP server {self.config.name!r} answered error {exc.code}: {exc.message}"
                return CallOutcome("protocol_error", message, code=exc.code)
            return self._failed(exc)
        except RuntimeError as exc:  # the SDK's checks of the result (output schema, result kind)
            return CallOutcome("protocol_error", f"MCP server {self.config.name!r} sent an invalid result: {exc}")
        except Exception as exc:  # noqa: BLE001 - any transport failure ends this call only
            return self._failed(exc)
        content = [c.model_dump(exclude_none=True, by_alias=True) for c in result.content]
        text = "\n".join(c.get("text", "") for c in content if c.get("type") == "text")
        structured = result.structured_content if isinstance(result.structured_content, dict) else None
        return CallOutcome("tool_error" if result.is_error else "ok", text, content, structured)

    def _failed(self, exc: BaseException) -> CallOutcome:
        """Mark the session broken (the task reconnects) after ``exc``; the
        call's ``unavailable`` outcome."""
        self.error = _describe(exc)
        self._broken.set()
        return CallOutcome("unavailable", f"MCP server {self.config.name!r} failed: {self.error}")


def _http_transport(cfg: McpServerConfig) -> contextlib.AbstractAsyncContextManager[Any]:
    """A streamable-HTTP transport with the configured headers."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    @contextlib.asynccontextmanager
    async def opened() -> Any:
        timeout = httpx2.Timeout(cfg.connect_timeout, read=max(cfg.call_timeout, 300.0))
        # made in a worker thread: the client's TLS context reads the CA bundle
        client = await asyncio.to_thread(httpx2.AsyncClient, headers=dict(cfg.headers), timeout=timeout)
        async with client:
            async with streamable_http_client(cfg.url, http_client=client) as streams:
                yield streams[0], streams[1]

    return opened()


def _describe(exc: BaseException) -> str:
    """One line for ``exc``, unwrapping single-exception groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def validate_arguments(tool: McpTool, arguments: Any) -> str | None:
    """The first way ``arguments`` breaks ``tool``'s input schema, or None."""
    import jsonschema

    if not isinstance(arguments, dict):
        return "arguments must be a JSON object"
    try:
        validator = jsonschema.validators.validator_for(tool.input_schema)
        validator.check_schema(tool.input_schema)
        error = jsonschema.exceptions.best_match(validator(tool.input_schema).iter_errors(arguments))
    except jsonschema.exceptions.SchemaError as exc:
        return f"the tool's input schema is invalid: {exc.message}"
    except Exception as exc:  # noqa: BLE001 - e.g. an unresolvable $ref in the server's schema
        return f"the tool's input schema cannot be checked: {type(exc).__name__}"
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message


class SessionLoop:
    """An event loop of its own in a daemon thread, where the MCP sessions
    live. :meth:`start` and :meth:`close` block (call them in a worker
    thread); :meth:`run` is awaited on any other loop."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """Whether the thread and its loop are running."""
        return self._thread is not None

    def start(self) -> None:
        """Start the thread and its loop (no-op when running). Blocking."""
        if self._thread is not None:
            return
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="mlxd-mcp-sessions", daemon=True)
        self._thread.start()

    async def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` on this loop and return its result; cancelling the
        caller cancels it there."""
        assert self.loop is not None, "SessionLoop.start() first"
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def close(self) -> None:
        """Stop the loop (its tasks must have ended), join the thread and
        close the loop. Blocking; no-op when not running."""
        if self._thread is None or self.loop is None:
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()
        self._thread = None
        self.loop = None


class McpHub:
    """All configured MCP servers, by name. Its coroutines are awaited on
    the gateway's event loop; the sessions themselves run on a
    :class:`SessionLoop` (started with the first server). The other
    methods only read and may be called from any thread."""

    def __init__(self, servers: list[McpServerConfig]) -> None:
        self.connections: dict[str, McpConnection] = {}
        self._configs = list(servers)
        self._sessions = SessionLoop()

    def _prepare(self) -> None:
        """Import the SDK and start the sessions' loop. Blocking: the
        gateway calls it in a worker thread (importing the SDK takes long
        enough to stall a loop)."""
        _require_sdk()
        self._sessions.start()

    async def start(self) -> None:
        """Start every server's session task.

        Raises:
            McpUnavailable: servers are configured but ``mcp`` is not installed.
        """
        if not self._configs:
            return
        await asyncio.to_thread(self._prepare)
        await self._sessions.run(self._add_all(self._configs))

    async def _add_all(self, configs: list[McpServerConfig]) -> None:
        """Start the sessions of ``configs`` (on the sessions' loop)."""
        for cfg in configs:
            self._add(cfg)

    def _add(self, cfg: McpServerConfig) -> None:
        conn = McpConnection(cfg)
        self.connections = {**self.connections, cfg.name: conn}
        conn.start()

    async def stop(self) -> None:
        """Close every session and stop the sessions' loop."""
        if not self._sessions.running:
            return
        await self._sessions.run(self._stop_all())
        await asyncio.to_thread(self._sessions.close)

    async def _stop_all(self) -> None:
        """Close every session (on the sessions' loop)."""
        await asyncio.gather(*(c.stop() for c in self.connections.values()))
        self.connections = {}

    async def reload(self, servers: list[McpServerConfig]) -> list[str]:
        """Apply a new ``[[mcp_servers]]`` list: start added servers, stop
        removed ones, restart changed ones, re-list the others. Returns one
        line per change.

        Raises:
            McpUnavailable: servers are configured but ``mcp`` is not installed.
        """
        if servers:
            await asyncio.to_thread(self._prepare)
        if not self._sessions.running:
            return []
        return await self._sessions.run(self._reload_here(servers))

    async def _reload_here(self, servers: list[McpServerConfig]) -> list[str]:
        """:meth:`reload`'s work, on the sessions' loop."""
        new = {s.name: s for s in servers}
        changes = []
        for name in list(self.connections):
            if name not in new or new[name] != self.connections[name].config:
                remaining = dict(self.connections)
                gone = remaining.pop(name)
                self.connections = remaining
                await gone.stop()
                changes.append(f"mcp server {name} {'removed' if name not in new else 'changed'}")
        for name, cfg in new.items():
            if name in self.connections:
                self.connections[name].relist()
            else:
                changes.append(f"mcp server {name} started")
                self._add(cfg)
        self._configs = list(servers)
        return changes

    async def wait_ready(self, timeout: float) -> bool:
        """Wait until every server is connected; False on timeout."""
        if not self.connections:
            return True
        return await self._sessions.run(self._wait_ready_here(timeout))

    async def _wait_ready_here(self, timeout: float) -> bool:
        """:meth:`wait_ready`'s work, on the sessions' loop."""
        results = await asyncio.gather(*(c.wait_ready(timeout) for c in self.connections.values()))
        return all(results)

    def tools(self) -> list[McpTool]:
        """Every connected server's allowed tools."""
        return [t for c in self.connections.values() for t in c.tools.values()]

    def status(self) -> list[dict[str, Any]]:
        """Each server's name, transport, connection state and last error."""
        return [
            {
                "name": name,
                "transport": "stdio" if c.config.command else "streamable_http",
                "connected": c.connected,
                "error": c.error,
            }
            for name, c in self.connections.items()
        ]

    def by_label(self, label: str) -> McpConnection | None:
        """The configured server named ``label``, or None."""
        return self.connections.get(label)

    def by_url(self, url: str) -> McpConnection | None:
        """The configured streamable-HTTP server whose ``url`` is ``url``
        (ignoring one trailing slash), or None."""
        want = url.rstrip("/")
        for conn in self.connections.values():
            if conn.config.url and conn.config.url.rstrip("/") == want:
                return conn
        return None

    async def call(self, server: str, tool: str, arguments: Any, *, origin: str = "execute") -> CallOutcome:
        """Validate and run one tool call; log one audit line.

        ``origin`` names the caller in the audit line (``execute``,
        ``responses``, ``messages``). Never raises for a failed call: the
        failure is the outcome.
        """
        started = time.monotonic()
        if self._sessions.running:
            outcome = await self._sessions.run(self._call(server, tool, arguments))
        else:  # no server configured: answered at once
            outcome = await self._call(server, tool, arguments)
        elapsed = time.monotonic() - started
        audit.info(
            "mcp call server=%s tool=%s origin=%s duration_ms=%d outcome=%s",
            server,
            tool,
            origin,
            elapsed * 1000,
            outcome.outcome,
        )
        if audit.isEnabledFor(logging.DEBUG):
            audit.debug("mcp call server=%s tool=%s arguments=%s", server, tool, json.dumps(arguments)[:4096])
        return outcome

    async def _call(self, server: str, tool: str, arguments: Any) -> CallOutcome:
        """:meth:`call`'s work, on the sessions' loop."""
        conn = self.connections.get(server)
        if conn is None:
            return CallOutcome("unknown_tool", f"no MCP server named {server!r} is configured")
        if not conn.connected and conn.error is None:  # still starting: give it a moment
            await conn.wait_ready(min(conn.config.connect_timeout, conn.config.call_timeout))
        spec = conn.tools.get(tool)
        if spec is None:
            if not conn.connected:
                return CallOutcome("unavailable", f"MCP server {server!r} is not connected: {conn.error or 'starting'}")
            return CallOutcome("unknown_tool", f"MCP server {server!r} has no tool {tool!r}")
        problem = validate_arguments(spec, arguments)
        if problem is not None:
            return CallOutcome("invalid_arguments", f"invalid arguments for {tool!r}: {problem}")
        return await conn.call(tool, arguments)


def _require_sdk() -> None:
    """Import the ``mcp`` SDK and every module this one imports where it is
    used (so those imports cost nothing on the event loop later); raise
    :class:`McpUnavailable` when it is missing. Blocking: the gateway
    calls it in a worker thread."""
    try:
        import httpx2  # noqa: F401
        import jsonschema  # noqa: F401
        import mcp  # noqa: F401
        import mcp.client.stdio  # noqa: F401
        import mcp.client.streamable_http  # noqa: F401
        import mcp.shared.exceptions  # noqa: F401
        import mcp_types  # noqa: F401
    except ImportError:
        raise McpUnavailable(
            "[[mcp_servers]] needs the mcp package: pip install -e '.[mcp]' in the mlxd clone (make installs it)"
        ) from None
