"""The interface protocol handlers use to reach the model workers.

Handlers in the protocol modules depend only on these two abstract types;
:mod:`gateway.pool` provides the implementation backed by worker processes.
All methods run on the gateway's event loop and never block it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator, Protocol

from shared.protocol import GenerateRequest, RequestOutput


@dataclass(frozen=True)
class ModelInfo:
    """A configured model as listed by ``GET /v1/models``.

    ``state`` is one of ``starting``, ``ready``, ``restarting``, ``failed``.
    ``created`` is a Unix timestamp (when the gateway configured it).
    """

    name: str
    created: int
    state: str
    aliases: tuple[str, ...] = ()


class RequestStream(Protocol):
    """The outputs of one admitted request, in order.

    Iterating yields :class:`RequestOutput` items and stops right after the
    terminal one (``finish_reason`` set); exactly one terminal output is
    always delivered, also when the worker dies (then ``finish_reason`` is
    ``"error"`` with ``error_kind="unavailable"``). ``aclose`` aborts the
    request in the worker if it has not finished yet (client gone); it is
    idempotent and safe to call from ``finally`` blocks and after
    cancellation.
    """

    def __aiter__(self) -> AsyncIterator[RequestOutput]: ...

    async def __anext__(self) -> RequestOutput: ...

    async def aclose(self) -> None: ...


class Engine(Protocol):
    """What handlers may ask of the model workers."""

    def resolve(self, name: str) -> str:
        """Return the canonical configured name for ``name`` (or an alias).

        Raises:
            gateway.errors.APIError: 404 ``model_not_found``.
        """
        ...

    def models(self) -> list[ModelInfo]:
        """Every configured model with its current state."""
        ...

    async def submit(self, model: str, request: GenerateRequest) -> RequestStream:
        """Send ``request`` to the worker of canonical model ``model``.

        Raises:
            gateway.errors.APIError: 503 when the worker is not ready.
        """
        ...
