"""Per-key limits: what each API key may do, counted in the gateway.

Belongs here: the sliding windows and counters of each key
(:mod:`~gateway.limits.counters`), the ASGI middleware that admits or
refuses a model request by them and adds the rate-limit headers
(:mod:`~gateway.limits.middleware`), and the ``/metrics`` series per key
name (:mod:`~gateway.limits.series`). The key itself is never kept, shown
or logged here: counters are by the key's configured ``name``, so they
survive a config reload that keeps the name.

Imports: :mod:`gateway.core` (the request's grant, errors),
:mod:`gateway.frontend` (a 429 in the shape of the route's protocol) and
:mod:`shared`; never a front-end. Runs on the gateway's event loop;
nothing here blocks.
"""
