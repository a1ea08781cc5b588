"""Cached model state reused across requests.

Belongs here: the prefix cache (:mod:`~worker.caches.prefix`), its disk tier
(:mod:`~worker.caches.disk`), and what kind of per-layer cache a model keeps
(:mod:`~worker.caches.profile`).

Imports: :mod:`shared`, MLX and mlx-lm; nothing else of the worker. Runs on
the scheduler thread (every read or write of cached MLX state).
"""
