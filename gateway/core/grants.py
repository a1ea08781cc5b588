"""What the API key of the request being handled allows, for code far from
the HTTP layer.

:class:`KeyGrant` is set for the duration of one HTTP request by the
key-limits middleware (:mod:`gateway.limits`) in :data:`current_grant`, a
context variable, so it follows the request into its handler and every
task the handler starts, and never into another request's. Two readers:

- the worker pool's model lookup: a model the key may not use does not
  exist for that request (the protocol's own 404, as for an unknown name);
- the requests in flight (:mod:`gateway.workers.inflight`): each request
  captures the grant when it is submitted and reports its prompt plus
  completion tokens to it once, when it ends, for ``tokens_per_minute``.

No grant (no keys configured, or a route without one): everything is
allowed and nothing is counted. Pure; event loop only.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Callable

from shared.model_names import find_name


@dataclass(frozen=True)
class KeyGrant:
    """One request's key: its ``name``, the model names and aliases it may
    use (``models``; empty: every model) and ``spent``, called with the
    tokens of each of its model requests when that request ends."""

    name: str
    models: frozenset[str] = frozenset()
    spent: Callable[[int], None] = field(default=lambda tokens: None, compare=False)

    def allows(self, *names: str) -> bool:
        """Whether the key may use a model known by any of ``names`` (its
        canonical name and aliases), under the naming rule of every route
        (:func:`shared.model_names.find_name`: a key naming ``tiny:latest``
        may use a model named ``tiny``, and one naming ``tiny`` a model
        named ``tiny:latest``)."""
        return not self.models or any(find_name(name, self.models) is not None for name in names)


KEY_ENTRY_SCOPE = "mlxd.api_key"
"""The ASGI scope key under which the API-key check leaves the
:class:`shared.config.ApiKeyConfig` a request's key matched (absent: no key
matched, or no keys are configured)."""

current_grant: ContextVar[KeyGrant | None] = ContextVar("mlxd_key_grant", default=None)
"""The grant of the request being handled (None: no key limits apply)."""
