"""The model workers as the gateway sees them: the implementation of
:class:`gateway.core.backend.ModelBackend`.

Belongs here: the pool (:mod:`~gateway.workers.pool`), each configured
model's handle and lifecycle (:mod:`~gateway.workers.handle`), one worker
incarnation's process (:mod:`~gateway.workers.process`) or remote node link
(:mod:`~gateway.workers.node_link`), starting a child process off the
event loop (:mod:`~gateway.workers.child_process`), the requests in flight
(:mod:`~gateway.workers.inflight`), the memory budget, where model files live
(:mod:`~gateway.workers.model_paths`) and what they hold
(:mod:`~gateway.workers.model_files`, read in a worker thread) and what ``/health`` reports of a
worker (:mod:`~gateway.workers.status`).

Imports: :mod:`gateway.core`, :mod:`gateway.images` (a request's images are
made ready on submission), :mod:`gateway.hub` (``server.auto_pull`` fetches
a model before its worker starts) and :mod:`shared`; never a front-end. Runs on the
gateway's event loop; process spawning and socket I/O never block it.
"""
