"""Operator control of the models' caches and of requests in flight.

Belongs here: ``GET /v1/cache/stats``, ``DELETE /v1/cache`` and
``POST /v1/requests/{id}/cancel`` (:mod:`~gateway.control.routes`) and the
Structs of their answers (:mod:`~gateway.control.schema`). The per-model
status the dashboard reads is ``GET /v1/status``
(:mod:`gateway.dashboard`), not repeated here.

Imports: :mod:`gateway.core` and :mod:`shared`; the worker pool is reached
through ``request.app.state.backend``, never imported. Runs on the
gateway's event loop; a cache clear waits for the worker's answer without
blocking it.
"""
