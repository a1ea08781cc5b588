"""Images of requests, as the gateway handles them before a worker sees them.

Belongs here: image parts of every protocol turned into bytes
(:mod:`~gateway.images.parts`, pure), the remote image URL trust boundary
(:mod:`~gateway.images.remote` the entry, :mod:`~gateway.images.policy` the
rules, :mod:`~gateway.images.http` the pinned download), and making a
request's images ready for its worker (:mod:`~gateway.images.request`).

Imports: :mod:`gateway.core` and :mod:`shared` only. Runs on the gateway's
event loop, except the remote download, which runs on the fetch pool's
threads (blocking I/O only there).
"""
