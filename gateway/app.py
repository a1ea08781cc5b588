"""Assembly of the gateway's Starlette application.

Routes, middleware (from the outside in: Host check, CORS when configured,
API keys, the keys' limits, body cap) and error handlers
that answer every failure in the shape of the route's protocol (see
:mod:`gateway.frontend.error_shapes`: Anthropic's under ``/v1/messages``,
Ollama's under ``/api/`` and at ``/``, else OpenAI's). The worker pool is
started in the app's lifespan and stopped (workers asked to exit, then
killed) when the server shuts down.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from typing import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.anthropic import routes as anthropic_routes
from gateway.control.routes import control_routes
from gateway.core.errors import APIError
from gateway.dashboard.pages import PAGE_PATHS
from gateway.dashboard.recorder import RequestProtocolMiddleware
from gateway.dashboard.routes import Dashboard, dashboard_routes
from gateway.embeddings import routes as embeddings_routes
from gateway.frontend.error_shapes import error_response_for
from gateway.http.middleware import APIKeyMiddleware, BodyLimitMiddleware, HostCheckMiddleware, ProtocolCORSMiddleware
from gateway.hub.ollama_pull import delete_route, pull_route
from gateway.limits.counters import KeyLimits
from gateway.limits.middleware import KeyLimitMiddleware
from gateway.limits.series import KeySeriesCollector
from gateway.mcp import routes as mcp_routes
from gateway.mcp.client import McpHub
from gateway.metrics.registry import Metrics
from gateway.metrics.snapshot import ModelSnapshot
from gateway.ollama import routes as ollama_routes
from gateway.openai import routes as openai_routes
from gateway.openapi_document import openapi_response
from gateway.rerank import routes as rerank_routes
from gateway.responses import routes as responses_routes
from gateway.speech import routes as speech_routes
from gateway.transcription import routes as transcription_routes
from gateway.workers.pool import WorkerPool
from shared.config import Config, ServerConfig
from shared.config_values import is_loopback

log = logging.getLogger("mlxd.gateway")

LAZY_MODULES = ("anyio._backends._asyncio", "anyio._core._subprocesses")
"""Modules a library imports the first time it is used, which would be on
the event loop: anyio's asyncio backend (Starlette's streamed responses
and thread hand-offs) and its subprocesses (MCP servers over stdio). The
app imports them at start, in a worker thread."""


def import_lazy_modules() -> None:
    """Import :data:`LAZY_MODULES` (blocking: call it off the event loop;
    a module missing from this version of its library is skipped)."""
    for name in LAZY_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


async def health(request: Request) -> Response:
    """``GET /health``: 200 while the gateway runs, with each worker's state
    and counters (running, waiting, steps, tokens)."""
    return JSONResponse(request.app.state.backend.health())


async def ready(request: Request) -> Response:
    """``GET /ready``: 200 when every preloaded model is ready, else 503;
    the body has each model's state."""
    ok, body = request.app.state.backend.readiness()
    return JSONResponse(body, status_code=200 if ok else 503)


async def metrics(request: Request) -> Response:
    """``GET /metrics``: Prometheus text exposition of every series."""
    body, content_type = request.app.state.metrics.render()
    return Response(body, headers={"Content-Type": content_type})


def snapshots(pool: WorkerPool) -> Callable[[], list[ModelSnapshot]]:
    """What /metrics reads from ``pool`` at scrape time."""

    def read() -> list[ModelSnapshot]:
        return [
            ModelSnapshot(
                name=name,
                state=h.status.state,
                pid=h.status.pid,
                restarts=h.status.restarts,
                load_seconds=h.status.load_seconds,
                stats=h.status.stats if h.status.pid else None,
                working_set_bytes=h.status.working_set_bytes,
                memory_estimate=pool.memory.estimate(h),
                node=h.status.node,
            )
            for name, h in list(pool.handles.items())
        ]

    return read


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        err = APIError(404, f"Unknown route {request.method} {request.url.path}", code="unknown_route")
    elif exc.status_code == 405:
        err = APIError(405, f"Method {request.method} not allowed on {request.url.path}")
    else:
        err = APIError(exc.status_code, str(exc.detail))
    response = error_response_for(request.url.path, err)
    for name, value in (exc.headers or {}).items():  # e.g. Allow on a 405
        response.headers[name] = value
    return response


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    return error_response_for(request.url.path, exc)


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response_for(request.url.path, APIError(500, "Internal server error"))


async def _model_management(request: Request) -> Response:
    """Ollama's model-management routes: ``POST /api/pull`` and
    ``DELETE /api/delete`` are :mod:`gateway.hub.ollama_pull`'s when
    ``server.allow_model_management`` is true; everything else is the
    Ollama front-end's 403."""
    if request.app.state.config.server.allow_model_management:
        if (request.url.path, request.method) == ("/api/pull", "POST"):
            return await pull_route(request)
        if (request.url.path, request.method) == ("/api/delete", "DELETE"):
            return await delete_route(request)
    return await ollama_routes.model_management(request)


RERANK_PATHS = ("/v1/rerank", "/rerank", "/v2/rerank")
"""Where the rerank endpoint answers (the paths rerank clients call)."""

MODEL_MANAGEMENT = (
    ("/api/pull", "POST"),
    ("/api/delete", "DELETE"),
    ("/api/push", "POST"),
    ("/api/create", "POST"),
    ("/api/copy", "POST"),
)
"""Ollama's model-management routes, each with the method Ollama serves it on."""


def ollama_route_table() -> list[Route]:
    """The Ollama-compatible routes (:mod:`gateway.ollama.routes`)."""
    routes = [
        Route("/", ollama_routes.root, methods=["GET"]),
        Route("/api/version", ollama_routes.version, methods=["GET"]),
        Route("/api/tags", ollama_routes.list_tags, methods=["GET"]),
        Route("/api/ps", ollama_routes.list_running, methods=["GET"]),
        Route("/api/show", ollama_routes.show, methods=["POST"]),
        Route("/api/chat", ollama_routes.chat, methods=["POST"]),
        Route("/api/generate", ollama_routes.generate, methods=["POST"]),
        Route("/api/embed", ollama_routes.embed, methods=["POST"]),
        Route("/api/embeddings", ollama_routes.embeddings, methods=["POST"]),
    ]
    for path, method in MODEL_MANAGEMENT:
        routes.append(Route(path, _model_management, methods=[method]))
    return routes


def build_app(config: Config, pool: WorkerPool | None = None) -> Starlette:
    """Return the gateway app for ``config``.

    ``pool`` defaults to a :class:`WorkerPool` over ``config`` with metrics;
    it is started when the app starts and stopped when it stops, as are the
    sessions with the configured MCP servers (``app.state.mcp``) and the
    dashboard's sampling (``app.state.dashboard``, see
    :mod:`gateway.dashboard.routes`).
    """
    dashboard = Dashboard()
    backend = pool
    if backend is None:
        holder: list[WorkerPool] = []
        meter = Metrics(lambda: snapshots(holder[0])())
        backend = WorkerPool(config, metrics=dashboard.metrics(meter))
        holder.append(backend)
    else:
        meter = Metrics(snapshots(backend))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await asyncio.to_thread(import_lazy_modules)
        await backend.start()
        await hub.start()
        dashboard.start(backend, hub)
        try:
            yield
        finally:
            await dashboard.stop()
            await hub.stop()
            await backend.stop()

    hub = McpHub(config.mcp_servers)
    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/openapi.json", openapi_response, methods=["GET"]),
        Route("/v1/models", openai_routes.list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", openai_routes.retrieve_model, methods=["GET"]),
        Route("/v1/chat/completions", openai_routes.chat_completions, methods=["POST"]),
        Route("/v1/completions", openai_routes.completions, methods=["POST"]),
        Route("/v1/embeddings", embeddings_routes.create_embeddings, methods=["POST"]),
        *(Route(path, rerank_routes.rerank, methods=["POST"]) for path in RERANK_PATHS),
        Route("/v1/audio/speech", speech_routes.create_speech, methods=["POST"]),
        Route("/v1/audio/voices", speech_routes.list_voices, methods=["GET"]),
        Route("/v1/audio/transcriptions", transcription_routes.create_transcription, methods=["POST"]),
        Route("/v1/audio/translations", transcription_routes.create_translation, methods=["POST"]),
        Route("/v1/responses", responses_routes.create_response, methods=["POST"]),
        Route("/v1/messages", anthropic_routes.messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", anthropic_routes.count_tokens, methods=["POST"]),
        *ollama_route_table(),
        Route("/v1/mcp/tools", mcp_routes.list_tools, methods=["GET"]),
        Route("/v1/mcp/execute", mcp_routes.execute, methods=["POST"]),
        *dashboard_routes(),
        *control_routes(),
    ]

    def get_server() -> ServerConfig:
        return backend.config.server

    key_limits = KeyLimits()
    meter.registry.register(KeySeriesCollector(key_limits, get_server))

    middleware = [Middleware(HostCheckMiddleware, get_server=get_server, loopback=is_loopback(config.server.host))]
    if config.server.cors_origins:
        middleware.append(Middleware(ProtocolCORSMiddleware, origins=config.server.cors_origins))
    middleware += [
        Middleware(APIKeyMiddleware, get_server=get_server, public=PAGE_PATHS),
        Middleware(KeyLimitMiddleware, limits=key_limits),
        Middleware(BodyLimitMiddleware, limit=config.server.max_body_bytes, timeout=config.server.body_timeout),
        Middleware(RequestProtocolMiddleware),
    ]
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={
            HTTPException: _http_error,
            APIError: _api_error,
            Exception: _internal_error,
        },
        lifespan=lifespan,
    )
    app.state.backend = backend
    app.state.metrics = meter
    app.state.config = config
    app.state.mcp = hub
    app.state.dashboard = dashboard
    app.state.key_limits = key_limits
    return app
