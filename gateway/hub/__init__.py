"""Models from the Hugging Face Hub: the catalog of short names, pulling
(with progress, hash checks and a free-disk check), the local store
(listing, removal) and the audit log of who pulled or removed what.

Imports: :mod:`shared`, huggingface-hub and the standard library (and
Starlette for the Ollama routes it serves); nothing else of the gateway, so
the command line, the workers' handles (``server.auto_pull``) and
:mod:`gateway.app` (``/api/pull``, ``/api/delete``) can use it. Never MLX:
conversion, which needs mlx-lm, runs in its own process
(``python -m worker.loading.convert``). Blocking work (network, hashing,
scanning the cache) runs in threads, never on the event loop.

Modules: :mod:`gateway.hub.names` (validating repo ids, revisions, file
names, catalog names), :mod:`gateway.hub.catalog` (short names such as
``qwen3:4b``), :mod:`gateway.hub.selection` (which files MLX needs),
:mod:`gateway.hub.pull` (one pull), :mod:`gateway.hub.progress` (watching
and showing it), :mod:`gateway.hub.verify` (hashes), :mod:`gateway.hub.store`
(local models), :mod:`gateway.hub.audit` (the log of actions) and
:mod:`gateway.hub.commands` (``mlxd pull/ls/rm/ps/convert``). Whether a
downloaded snapshot may be served is :mod:`shared.hub_snapshots` (the
worker applies the same rule).
"""
