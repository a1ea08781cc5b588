"""HTTP plumbing around the app: the outermost layer of the gateway.

Belongs here: the pure ASGI middleware (Host check, CORS, API keys, body
cap: :mod:`~gateway.http.middleware`), the head-size and head-time guard of
the HTTP protocol (:mod:`~gateway.http.guard`), the open-file limit raised at
start (:mod:`~gateway.http.file_limit`).

Imports: :mod:`gateway.core`, :mod:`gateway.frontend` (a refusal is
rendered in the shape of the route's protocol,
:mod:`gateway.frontend.error_shapes`) and :mod:`shared`; never a front-end.
Runs on the gateway's event loop, ahead of every handler.
"""
