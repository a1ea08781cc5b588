"""The dashboard's routes: the status snapshot, the page, and the admin actions.

- ``GET /v1/status[?since=T]``: the :class:`gateway.dashboard.schema.Status`
  snapshot (samples only after Unix time ``T`` when given, so a page
  polling once a second receives each sample once).
- ``GET /dashboard`` (and its ``dashboard.css`` / ``dashboard.js``): the
  page (:mod:`gateway.dashboard.pages`), public: it holds no data.
- ``POST /v1/admin/load`` / ``POST /v1/admin/unload`` with ``{"model":
  NAME}``: load a model and answer once it is ready (or why it cannot be),
  or unload it once its requests have finished; both through the worker
  pool's own :meth:`~gateway.workers.pool.WorkerPool.load` /
  :meth:`~gateway.workers.pool.WorkerPool.unload` (what Ollama's load and
  ``keep_alive`` 0 use).
- ``POST /v1/admin/reload``: re-read the config file as SIGHUP does
  (``app.state.reload_config``, set by :func:`gateway.server.run`).

Every route but the page's needs an API key when keys are configured (the
:class:`gateway.http.middleware.APIKeyMiddleware`), which the page sends in the
``Authorization`` header, never in a cookie, so another site cannot make a
browser act with it. Without keys they follow the loopback rules of the
rest of the API. Errors are OpenAI-shaped (:mod:`gateway.frontend.error_shapes`).

:class:`Dashboard` is what the app keeps for these routes: the
:class:`~gateway.dashboard.recorder.ActivityRecorder` and the
:class:`~gateway.dashboard.snapshot.StatusBuilder`, started and stopped
with the app.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.core.errors import APIError, bad_request
from gateway.dashboard.pages import PAGE_HEADERS, read_pages
from gateway.dashboard.recorder import ActivityRecorder, RecordingMetrics
from gateway.dashboard.schema import ActionResult, ModelAction
from gateway.dashboard.snapshot import StatusBuilder

log = logging.getLogger("mlxd.gateway.dashboard")

JSON = "application/json"
"""Media type of every JSON answer here."""

_ACTION_DECODER = msgspec.json.Decoder(ModelAction)


class Dashboard:
    """The recorder and snapshot builder behind the dashboard routes.

    Construct it with the app; give :meth:`metrics` to the worker pool;
    call :meth:`start` (on the running loop) with the pool and the MCP hub,
    and :meth:`stop` at shutdown."""

    def __init__(self) -> None:
        self.recorder = ActivityRecorder()
        self.builder: StatusBuilder | None = None

    def metrics(self, inner: Any) -> RecordingMetrics:
        """``inner`` metrics that also record each request (see
        :meth:`ActivityRecorder.metrics`)."""
        return self.recorder.metrics(inner)

    def start(self, pool: Any, hub: Any) -> None:
        """Build snapshots of ``pool`` and ``hub`` from now on and take one
        sample a second."""
        self.builder = StatusBuilder(pool, hub, self.recorder)
        self.recorder.start(self.builder.gauges)

    async def stop(self) -> None:
        """Stop sampling."""
        await self.recorder.stop()


def _dashboard(request: Request) -> Dashboard:
    dashboard: Dashboard = request.app.state.dashboard
    if dashboard.builder is None:
        raise APIError(503, "the gateway is still starting", code="starting", retry_after=1)
    return dashboard


def _json(value: msgspec.Struct, status: int = 200) -> Response:
    return Response(msgspec.json.encode(value), status_code=status, media_type=JSON)


async def status(request: Request) -> Response:
    """``GET /v1/status``: the snapshot.

    Raises:
        gateway.core.errors.APIError: 400 when ``since`` is not a finite number.
    """
    since = None
    raw = request.query_params.get("since")
    if raw is not None:
        try:
            since = float(raw)
        except ValueError:
            since = math.nan
        if not math.isfinite(since):
            raise bad_request("'since' must be a Unix time in seconds", param="since")
    builder = _dashboard(request).builder
    assert builder is not None
    return _json(builder.status(since))


async def _model_action(request: Request) -> str:
    """The canonical model name a load/unload body names.

    Raises:
        gateway.core.errors.APIError: 400 for a body that is not ``{"model":
            NAME}``; 404 for an unknown model.
    """
    try:
        action = _ACTION_DECODER.decode(await request.body())
    except msgspec.ValidationError as exc:
        raise bad_request(f"Invalid body: {exc}", param="model") from None
    except msgspec.DecodeError:
        raise bad_request('The body must be a JSON object {"model": "<name>"}') from None
    return request.app.state.backend.resolve(action.model)


async def load(request: Request) -> Response:
    """``POST /v1/admin/load``: start the model's worker if needed and
    answer once it is ready.

    Raises:
        gateway.core.errors.APIError: 400 / 404 as :func:`_model_action`; 503
            when it cannot be loaded (failed, draining, over the memory
            budget, not ready in ``worker_start_timeout``), with the reason.
    """
    name = await _model_action(request)
    pool = request.app.state.backend
    was = pool.handles[name].status.state
    await pool.load(name)
    change = f"model {name} is already loaded" if was == "ready" else f"loaded model {name}"
    log.info("dashboard: %s", change)
    return _json(ActionResult(action="load", model=name, changes=[change]))


async def unload(request: Request) -> Response:
    """``POST /v1/admin/unload``: unload the model's worker once its
    requests in flight have finished (at most ``drain_timeout`` seconds);
    it starts again on its next request.

    Raises:
        gateway.core.errors.APIError: 400 / 404 as :func:`_model_action`.
    """
    name = await _model_action(request)
    pool = request.app.state.backend
    was = pool.handles[name].status.state
    if not pool.handles[name].resident:
        return _json(ActionResult(action="unload", model=name, changes=[f"model {name} is not loaded ({was})"]))
    await pool.unload(name, "asked to unload through /v1/admin/unload")
    return _json(ActionResult(action="unload", model=name, changes=[f"unloaded model {name}"]))


async def reload(request: Request) -> Response:
    """``POST /v1/admin/reload``: re-read the config file and apply it (an
    empty body, or ``{}``).

    Raises:
        gateway.core.errors.APIError: 400 for any other body; 409 when the config
            file is invalid (the running config stays); 503 when this
            process was not started by ``mlxd serve`` (no file to re-read).
    """
    body = (await request.body()).strip()
    if body and body != b"{}":
        raise bad_request("POST /v1/admin/reload takes no body (or {})")
    reload_config = getattr(request.app.state, "reload_config", None)
    if reload_config is None:
        raise APIError(
            503, "this gateway was not started by `mlxd serve`: it has no config file to reload", code="no_config_file"
        )
    applied, lines = await reload_config()
    if not applied:
        raise APIError(409, lines[0] if lines else "reload refused", code="config_invalid")
    return _json(ActionResult(action="reload", model=None, changes=lines or ["no changes"]))


def page_routes() -> list[Route]:
    """The routes of the page's files, read now from the package data."""
    routes = []
    for path, (content, media_type) in read_pages().items():

        async def serve(request: Request, content: bytes = content, media_type: str = media_type) -> Response:
            return Response(content, media_type=media_type, headers=PAGE_HEADERS)

        serve.__doc__ = f"``GET {path}``: a file of the dashboard page."
        routes.append(Route(path, serve, methods=["GET"]))
    return routes


def dashboard_routes() -> list[Route]:
    """Every route of this module, for :func:`gateway.app.build_app`."""
    return [
        Route("/v1/status", status, methods=["GET"]),
        Route("/v1/admin/load", load, methods=["POST"]),
        Route("/v1/admin/unload", unload, methods=["POST"]),
        Route("/v1/admin/reload", reload, methods=["POST"]),
        *page_routes(),
    ]
