"""``GET /metrics``: Prometheus series of the gateway.

Belongs here: the registry and request series (:mod:`~gateway.metrics.registry`),
per-request timing (:mod:`~gateway.metrics.request_timer`) and the pool
series built at scrape time (:mod:`~gateway.metrics.snapshot`).

Imports: :mod:`gateway.core`, :mod:`gateway.workers` (what a worker's
status says) and :mod:`shared`; never a front-end. Runs on the gateway's
event loop (a scrape reads snapshots; it never waits on a worker).
"""
