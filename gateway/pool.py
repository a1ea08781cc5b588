"""The :class:`gateway.engine_api.Engine` backed by worker processes.

Maps configured model names and aliases to their :class:`WorkerHandle` and
owns the gateway's private socket directory. Runs on the event loop only.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from gateway.engine_api import ModelInfo, ModelLimits
from gateway.errors import model_not_found
from gateway.worker_handle import WorkerHandle, WorkerRequestStream
from shared.config import Config
from shared.protocol import GenerateRequest
from shared.sockets import make_socket_dir, remove_socket_dir


class WorkerPool:
    """One :class:`WorkerHandle` per configured model.

    Construct it anywhere; call :meth:`start` on the running loop (it spawns
    every worker without waiting for them) and :meth:`stop` at shutdown.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.created = int(time.time())
        self.handles: dict[str, WorkerHandle] = {}
        self._names: dict[str, str] = {}
        for model in config.models:
            for name in (model.name, *model.aliases):
                self._names[name] = model.name
        self._socket_dir: str | None = None

    def start(self) -> None:
        """Create the socket directory and start every worker."""
        self._socket_dir = make_socket_dir()
        for model in self.config.models:
            handle = WorkerHandle(model, self.config.server, self._socket_dir)
            self.handles[model.name] = handle
            handle.start()

    async def stop(self) -> None:
        """Stop every worker (in parallel) and remove the socket directory."""
        await asyncio.gather(*(h.stop() for h in self.handles.values()))
        if self._socket_dir is not None:
            remove_socket_dir(self._socket_dir)

    async def wait_ready(self, timeout: float) -> bool:
        """Wait until every worker is ready; False on timeout."""
        results = await asyncio.gather(*(h.wait_ready(timeout) for h in self.handles.values()))
        return all(results)

    def resolve(self, name: str) -> str:
        """Canonical model name for ``name``; raises the 404 APIError."""
        try:
            return self._names[name]
        except KeyError:
            raise model_not_found(name) from None

    def limits(self, model: str) -> ModelLimits:
        """The configured request limits of canonical model ``model``."""
        return ModelLimits(max_n=self.handles[model].model.max_n)

    def models(self) -> list[ModelInfo]:
        """Every configured model, in config order, with its state."""
        return [
            ModelInfo(
                name=m.name,
                created=self.created,
                state=self.handles[m.name].status.state if m.name in self.handles else "stopped",
                aliases=tuple(m.aliases),
            )
            for m in self.config.models
        ]

    async def submit(self, model: str, request: GenerateRequest) -> WorkerRequestStream:
        """Route ``request`` to ``model``'s worker (503 APIError if not ready)."""
        return self.handles[model].submit(request)

    def health(self) -> dict[str, object]:
        """The body of ``GET /health``: each model's worker status."""
        import msgspec

        return {
            "status": "ok",
            "models": {
                name: msgspec.to_builtins(h.status) for name, h in self.handles.items()
            },
        }


def new_request_id(prefix: str) -> str:
    """A unique request id such as ``chatcmpl-<32 hex>``."""
    return f"{prefix}-{uuid.uuid4().hex}"
