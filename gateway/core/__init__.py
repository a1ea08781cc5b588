"""The gateway's core: what every other package may lean on.

Belongs here: client-facing errors and the one table of worker error kinds
(:mod:`~gateway.core.errors`), the interface the front-ends reach the model
workers through (:mod:`~gateway.core.backend`), the minting of ids
(:mod:`~gateway.core.ids`). Small, pure, protocol-neutral.

Imports: :mod:`shared` only; nothing of the gateway. Runs on the gateway's
event loop (nothing here blocks or does I/O).
"""
