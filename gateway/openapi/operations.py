"""The Operations routes' part of the OpenAPI document: liveness, readiness
and metrics (``/health``, ``/ready``, ``/metrics``), the status snapshot,
admin actions and dashboard page (:mod:`gateway.dashboard`), the cache and
request control routes (:mod:`gateway.control`) and ``GET /openapi.json``
itself, with the types they are generated from.

Assembled with the other parts by :mod:`gateway.openapi_document`.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from gateway.control.schema import CacheCleared, CacheStats, RequestCancelled
from gateway.dashboard.schema import ActionResult, ModelAction, Status
from gateway.frontend.openapi import API_KEY_SCHEME, BEARER_SCHEME, JSON, OPENAI_ERRORS, PathBuilder
from gateway.workers.status import WorkerStatus

METRICS_MEDIA_TYPE = "text/plain"
"""The media type of ``GET /metrics`` (Prometheus text exposition)."""


class Health(msgspec.Struct, kw_only=True):
    """The ``GET /health`` body: the gateway's state and each configured
    model's worker status."""

    status: Literal["ok", "draining"]
    models: dict[str, WorkerStatus]


class Readiness(msgspec.Struct, kw_only=True):
    """The ``GET /ready`` body: whether every preloaded model is ready, and
    each model's worker state."""

    ready: bool
    models: dict[str, str]


ANSWERS: dict[str, Any] = {
    "health": Health,
    "readiness": Readiness,
    "status": Status,
    "cache_stats": CacheStats,
    "cache_cleared": CacheCleared,
    "request_cancelled": RequestCancelled,
    "admin_action": ActionResult,
    # the admin actions' body, listed after their answer (the components keep this order)
    "model_action": ModelAction,
}
"""The answers the routes encode, and the admin actions' body, by their key
in the document's types."""

DECODED = frozenset({"model_action"})
"""The keys of this part's types that the server decodes."""


def probe_paths(b: PathBuilder) -> dict[str, Any]:
    """``GET /health`` (always public), ``GET /ready`` and ``GET /metrics``
    (a key only with ``server.metrics_require_key``)."""
    optional_key = [{}, {BEARER_SCHEME: []}, {API_KEY_SCHEME: []}]
    return {
        "/health": {
            "get": {
                "operationId": "health",
                "summary": "Liveness, with each model's worker status",
                "tags": ["Operations"],
                "security": [],
                "responses": b.ok("The gateway runs", b.refs["health"]),
            }
        },
        "/ready": {
            "get": {
                "operationId": "ready",
                "summary": "Readiness: every preloaded model is ready",
                "tags": ["Operations"],
                "security": optional_key,
                "responses": {
                    **b.ok("Every preloaded model is ready", b.refs["readiness"]),
                    "503": {
                        "description": "Some preloaded model is not ready, or the server is draining",
                        "content": {JSON: {"schema": b.refs["readiness"]}},
                    },
                    **b.error_responses({401: OPENAI_ERRORS[401] + " (with `metrics_require_key`)"}, False),
                },
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics",
                "tags": ["Operations"],
                "security": optional_key,
                "responses": {
                    "200": {
                        "description": "Prometheus text exposition",
                        "content": {METRICS_MEDIA_TYPE: {"schema": {"type": "string"}}},
                    },
                    **b.error_responses({401: OPENAI_ERRORS[401] + " (with `metrics_require_key`)"}, False),
                },
            }
        },
    }


def document_paths(b: PathBuilder) -> dict[str, Any]:
    """``GET /openapi.json``: this document (always public)."""
    return {
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document",
                "tags": ["Operations"],
                "security": [],
                "responses": b.ok("The OpenAPI document", {"type": "object"}),
            }
        }
    }


def dashboard_paths(b: PathBuilder) -> dict[str, Any]:
    """The status snapshot, the admin actions and the dashboard page
    (:mod:`gateway.dashboard.routes`)."""
    key = {401: OPENAI_ERRORS[401]}
    model_body = {
        "required": True,
        "content": {JSON: {"schema": b.refs["model_action"], "example": {"model": b.model}}},
    }
    bad_body = {400: 'The body is not `{"model": NAME}`', 413: OPENAI_ERRORS[413]}
    result = b.refs["admin_action"]

    def admin(operation_id: str, summary: str, body: Any, ok: str, errors: dict[int, str]) -> dict[str, Any]:
        operation = {
            "operationId": operation_id,
            "summary": summary,
            "tags": ["Operations"],
            "responses": {**b.ok(ok, result), **b.error_responses({**key, **errors}, False)},
        }
        if body is not None:
            operation["requestBody"] = body
        return {"post": operation}

    return {
        "/v1/status": {
            "get": {
                "operationId": "status",
                "summary": "Every model's state, memory, caches and requests; recent samples and requests",
                "tags": ["Operations"],
                "parameters": [
                    {
                        "name": "since",
                        "in": "query",
                        "required": False,
                        "description": "Only the samples after this Unix time (the `t` of the last one seen)",
                        "schema": {"type": "number"},
                    }
                ],
                "responses": {
                    **b.ok("The status snapshot", b.refs["status"]),
                    **b.error_responses(
                        {**key, 400: "`since` is not a number", 503: "The gateway is still starting"}, False
                    ),
                },
            }
        },
        "/v1/admin/load": admin(
            "adminLoad",
            "Load a model; answers once it is ready",
            model_body,
            "The model is ready",
            {
                **bad_body,
                404: OPENAI_ERRORS[404],
                503: "The model cannot be loaded (failed, draining, over the memory budget, or not ready in "
                "`worker_start_timeout`)",
            },
        ),
        "/v1/admin/unload": admin(
            "adminUnload",
            "Unload a model once its requests have finished",
            model_body,
            "The model is unloaded (or was not loaded)",
            {**bad_body, 404: OPENAI_ERRORS[404]},
        ),
        "/v1/admin/reload": admin(
            "adminReload",
            "Re-read the config file and apply it (as SIGHUP and `mlxd reload` do)",
            {
                "required": False,
                "content": {JSON: {"schema": {"type": "object", "maxProperties": 0}, "example": {}}},
            },
            "The config was applied; one line per change",
            {
                400: "A body other than `{}`",
                409: "The config file is invalid; the running config stays",
                413: OPENAI_ERRORS[413],
                503: "The gateway was not started by `mlxd serve` (no config file to reload)",
            },
        ),
        "/dashboard": {
            "get": {
                "operationId": "dashboard",
                "summary": "The live dashboard page (reads `GET /v1/status`)",
                "tags": ["Operations"],
                "security": [],
                "responses": {
                    "200": {"description": "The page", "content": {"text/html": {"schema": {"type": "string"}}}}
                },
            }
        },
    }


def control_paths(b: PathBuilder) -> dict[str, Any]:
    """The cache and request control routes (:mod:`gateway.control.routes`)."""
    key = {401: OPENAI_ERRORS[401]}
    model = {
        "name": "model",
        "in": "query",
        "required": False,
        "description": "One model (a name or alias); every model the key may use when left out",
        "schema": {"type": "string"},
    }
    return {
        "/v1/cache/stats": {
            "get": {
                "operationId": "cacheStats",
                "summary": "Per model: the prefix cache's memory and disk tiers (entries, bytes, hit rates, "
                "evictions) and its warm prompts",
                "tags": ["Operations"],
                "parameters": [model],
                "responses": {
                    **b.ok("Every (or the one) model's cache", b.refs["cache_stats"]),
                    **b.error_responses({**key, 404: OPENAI_ERRORS[404]}, False),
                },
            }
        },
        "/v1/cache": {
            "delete": {
                "operationId": "clearCache",
                "summary": "Empty the prefix cache, memory and disk tiers, of one model or of every model",
                "tags": ["Operations"],
                "parameters": [model],
                "responses": {
                    **b.ok("What each model's clear dropped", b.refs["cache_cleared"]),
                    **b.error_responses(
                        {**key, 404: OPENAI_ERRORS[404], 503: "A worker did not clear its cache in time"}, False
                    ),
                },
            }
        },
        "/v1/requests/{request_id}/cancel": {
            "post": {
                "operationId": "cancelRequest",
                "summary": "End a request in flight by its id (`chatcmpl-…`, `cmpl-…`, `resp_…`, `msg_…`): "
                "its client gets one terminal abort",
                "tags": ["Operations"],
                "parameters": [
                    {
                        "name": "request_id",
                        "in": "path",
                        "required": True,
                        "description": "The id the request's answer carries",
                        "schema": {"type": "string"},
                    }
                ],
                "responses": {
                    **b.ok("The request was ended", b.refs["request_cancelled"]),
                    **b.error_responses(
                        {**key, 404: "No such request in flight for this key (`request_not_found`)"}, False
                    ),
                },
            }
        },
    }
