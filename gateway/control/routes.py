"""The control routes: the prefix caches' counters, clearing them, and
cancelling a request by its id.

- ``GET /v1/cache/stats[?model=NAME]``: per model, the memory and disk
  tiers' entries, bytes, hits, hit rates and evictions and the warm
  prompts, from the worker's latest heartbeat
  (:class:`gateway.control.schema.CacheStats`).
- ``DELETE /v1/cache[?model=NAME]``: empty the prefix cache of one model
  or of every model, memory and disk tiers, e.g. after a chat-template
  change; answers once each ready worker has done it
  (:class:`gateway.control.schema.CacheCleared`). Requests running go on
  from their own state.
- ``POST /v1/requests/{id}/cancel``: end a request in flight by the id it
  was given (the ``id`` of its answer: ``chatcmpl-…``, ``cmpl-…``,
  ``resp_…``, ``msg_…``); its client gets exactly one terminal abort (an
  error answer, or a stream's error event) and the worker drops it as
  after a disconnect. 404 ``request_not_found`` for an id not in flight
  (finished, unknown, or another API key's).

Each needs an API key when keys are configured (the key middleware); a
key limited to some models sees only those (another model is a 404, as
for the rest of the API). Errors are OpenAI-shaped.
"""

from __future__ import annotations

import logging

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.control.schema import (
    CacheCleared,
    CacheStats,
    DiskTier,
    Dropped,
    MemoryTier,
    ModelCacheCleared,
    ModelCacheStats,
    RequestCancelled,
    WarmPrompts,
)
from gateway.core.errors import APIError
from shared.protocol import WorkerStats

log = logging.getLogger("mlxd.gateway.control")

JSON = "application/json"
"""Media type of every answer here."""


def _json(value: msgspec.Struct) -> Response:
    return Response(msgspec.json.encode(value), media_type=JSON)


def _models(request: Request) -> list[str]:
    """The canonical models a route acts on: ``?model=NAME`` (404 when
    unknown or not allowed for the key) or every model the key may use."""
    backend = request.app.state.backend
    name = request.query_params.get("model")
    if name is not None:
        return [backend.resolve(name)]
    return [info.name for info in backend.models()]


def _rate(hits: int, queries: int) -> float:
    return round(hits / queries, 4) if queries else 0.0


def model_cache_stats(model: str, state: str, stats: WorkerStats | None) -> ModelCacheStats:
    """One model's :class:`ModelCacheStats` from its worker's latest
    counters (None: no worker has reported)."""
    if stats is None:
        return ModelCacheStats(model=model, state=state, memory=None, disk=None, warm=None)
    memory = MemoryTier(
        entries=stats.cache_entries,
        bytes=stats.cache_bytes,
        budget_bytes=stats.cache_budget_bytes,
        queries=stats.cache_queries,
        hits=stats.cache_hits,
        hit_rate=_rate(stats.cache_hits, stats.cache_queries),
        cached_tokens=stats.cached_tokens,
        evictions=stats.cache_evictions,
    )
    disk = DiskTier(
        entries=stats.disk_cache_entries,
        bytes=stats.disk_cache_bytes,
        hits=stats.disk_cache_hits,
        hit_rate=_rate(stats.disk_cache_hits, stats.cache_queries),
        cached_tokens=stats.disk_cached_tokens,
        writes=stats.disk_cache_writes,
        rejected=stats.disk_cache_rejected,
        evictions=stats.disk_cache_evictions,
    )
    warm = WarmPrompts(prompts=stats.warm_prompts, tokens=stats.warm_tokens)
    return ModelCacheStats(model=model, state=state, memory=memory, disk=disk, warm=warm)


async def cache_stats(request: Request) -> Response:
    """``GET /v1/cache/stats``: see the module docstring.

    Raises:
        gateway.core.errors.APIError: 404 for an unknown ``model``.
    """
    backend = request.app.state.backend
    found = [model_cache_stats(name, *backend.cache_stats(name)) for name in _models(request)]
    return _json(CacheStats(models=found))


async def clear_cache(request: Request) -> Response:
    """``DELETE /v1/cache``: see the module docstring.

    Raises:
        gateway.core.errors.APIError: 404 for an unknown ``model``; 503 when a
            worker does not answer in time or stops meanwhile.
    """
    backend = request.app.state.backend
    results = []
    for name in _models(request):
        done = await backend.clear_cache(name)
        state = backend.cache_stats(name)[0]
        if done is None:
            results.append(
                ModelCacheCleared(
                    model=name,
                    state=state,
                    cleared=False,
                    memory=Dropped(entries=0, bytes=0),
                    disk=Dropped(entries=0, bytes=0),
                )
            )
            continue
        log.info("prefix cache of %s cleared through DELETE /v1/cache", name)
        results.append(
            ModelCacheCleared(
                model=name,
                state=state,
                cleared=True,
                memory=Dropped(entries=done.entries, bytes=done.bytes),
                disk=Dropped(entries=done.disk_entries, bytes=done.disk_bytes),
            )
        )
    return _json(CacheCleared(models=results))


async def cancel_request(request: Request) -> Response:
    """``POST /v1/requests/{id}/cancel``: see the module docstring.

    Raises:
        gateway.core.errors.APIError: 404 ``request_not_found`` when no request
            with that id is in flight for this key.
    """
    request_id = request.path_params["request_id"]
    model = request.app.state.backend.cancel(request_id)
    if model is None:
        raise APIError(404, f"No request '{request_id}' is in flight", param="id", code="request_not_found")
    log.info("request %s of %s cancelled through its cancel route", request_id, model)
    return _json(RequestCancelled(id=request_id, model=model))


def control_routes() -> list[Route]:
    """Every route of this module, for :func:`gateway.app.build_app`."""
    return [
        Route("/v1/cache/stats", cache_stats, methods=["GET"]),
        Route("/v1/cache", clear_cache, methods=["DELETE"]),
        Route("/v1/requests/{request_id}/cancel", cancel_request, methods=["POST"]),
    ]
