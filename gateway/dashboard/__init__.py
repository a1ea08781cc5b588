"""The gateway's live view of itself: ``GET /v1/status``, the ``/dashboard``
page and the ``mlxd top`` / ``mlxd ps`` terminal views.

- :mod:`gateway.dashboard.schema`: the status snapshot's msgspec Structs
  (what ``GET /v1/status`` answers, documented in the OpenAPI document);
- :mod:`gateway.dashboard.recorder`: the small ring buffers of recent
  requests and per-second samples the gateway keeps for it (never prompt
  or answer text);
- :mod:`gateway.dashboard.snapshot`: builds one snapshot from state the
  gateway already has (worker handles, heartbeats, the recorder);
- :mod:`gateway.dashboard.routes`: the routes (status, page, load, unload,
  reload) and :mod:`gateway.dashboard.pages` the static files shipped in
  ``static/``;
- :mod:`gateway.dashboard.top`: the terminal views, reading ``/v1/status``
  over HTTP through :mod:`gateway.dashboard.client`.

Imports: :mod:`gateway.core` and :mod:`shared` only (the pool and the hub
are handed in by the composition, :mod:`gateway.app`); never a front-end.
Runs on the gateway's event loop and never blocks it; ``top`` and the
client run in the ``mlxd`` command's own process. Nothing here imports MLX.
"""
