"""The interface protocol handlers use to reach the model workers.

Handlers in the protocol modules depend only on these two abstract types;
:mod:`gateway.workers.pool` provides the implementation backed by worker processes.
All methods run on the gateway's event loop and never block it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Protocol

from shared.model_kind import ModelKind
from shared.protocol import (
    EmbedRequest,
    GenerateRequest,
    RequestOutput,
    RerankRequest,
    SpeechRequest,
    TranscribeRequest,
)


@dataclass(frozen=True)
class ModelInfo:
    """A configured model as listed by ``GET /v1/models``.

    ``state`` is one of ``starting``, ``ready``, ``restarting``, ``failed``.
    ``created`` is a Unix timestamp (when the gateway configured it).
    ``sampling_defaults`` maps each sampling setting with a model default
    (``temperature``, ``top_p``, ``top_k``, ``min_p``,
    ``repetition_penalty``) to the value its worker uses where a request
    sets none; None until the worker has loaded the model.
    ``context_length`` is the model's context in tokens (None until its
    worker has loaded it once); ``source`` its configured ``source``;
    ``kind`` ``generate``, ``vision`` (takes images), ``embedding``,
    ``rerank`` or ``transcription`` (None: not known yet); ``thinking``
    whether it has reasoning markup, i.e. can think (None: only its worker
    can tell, once it has loaded the model; the rule is
    :meth:`gateway.workers.pool.WorkerPool.thinks`).
    """

    name: str
    created: int
    state: str
    aliases: tuple[str, ...] = ()
    sampling_defaults: dict[str, float] | None = None
    context_length: int | None = None
    source: str = ""
    kind: str | None = None
    thinking: bool | None = None


@dataclass(frozen=True)
class Residency:
    """A model whose worker is loaded (Ollama's ``GET /api/ps``):
    ``memory_bytes`` its MLX memory in use (or the pool's estimate),
    ``expires_at`` the Unix time at which it unloads if left idle (None:
    never), ``context_length`` its context in tokens (None: unknown);
    ``download``: the progress of the pull of a model still
    ``downloading`` (listed with no memory yet), else None."""

    name: str
    memory_bytes: int
    expires_at: float | None
    context_length: int | None
    download: dict | None = None


@dataclass(frozen=True)
class ModelFiles:
    """A configured model's files as the gateway found them on its disk
    when it last read them, without loading the model.

    ``kind`` as the files (or the config) tell it (None: not known from
    here); ``weight_bytes`` the size of its weight files (None: unknown);
    ``config`` its ``config.json`` and ``chat_template`` its chat template
    text (``{}`` and ``""`` when unknown); ``voices`` the voice packs of a
    speech model (``voices/<name>.safetensors``), sorted."""

    kind: ModelKind | None = None
    weight_bytes: int | None = None
    config: dict[str, Any] = field(default_factory=dict)
    chat_template: str = ""
    voices: tuple[str, ...] = ()


UNREAD = ModelFiles()
"""What is known of a model whose files have not been read."""


class RequestStream(Protocol):
    """The outputs of one admitted request, in order.

    Iterating yields :class:`RequestOutput` items (of every choice,
    interleaved; ``output.index`` names the choice) and stops right after
    the request's end: when each of its ``n`` choices has had its terminal
    ``stop``/``length`` output, or right after the first ``error`` or
    ``abort`` output, which ends all choices. That end is always delivered,
    also when the worker dies (then ``finish_reason`` is ``"error"`` with
    ``error_kind="unavailable"``). ``aclose`` aborts the
    request in the worker if it has not finished yet (client gone); it is
    idempotent and safe to call from ``finally`` blocks and after
    cancellation.
    """

    def __aiter__(self) -> AsyncIterator[RequestOutput]: ...

    async def __anext__(self) -> RequestOutput: ...

    async def aclose(self) -> None:
        """Abort the request unless it already ended; idempotent."""
        ...


@dataclass(frozen=True)
class ModelLimits:
    """Per-model request limits from the config: the largest ``n``; the
    largest audio upload in bytes (transcription models)."""

    max_n: int = 1
    max_audio_bytes: int = 25 * 1024 * 1024


class ModelBackend(Protocol):
    """What handlers may ask of the model workers."""

    def limits(self, model: str) -> ModelLimits:
        """The request limits of canonical model ``model``."""
        ...

    def resolve(self, name: str) -> str:
        """Return the canonical configured name for ``name`` (or an alias).

        Raises:
            gateway.core.errors.APIError: 404 ``model_not_found``.
        """
        ...

    def models(self) -> list[ModelInfo]:
        """Every configured model with its current state."""
        ...

    async def submit(
        self,
        model: str,
        request: GenerateRequest | EmbedRequest | RerankRequest | SpeechRequest | TranscribeRequest,
        keep_alive: float | None = None,
    ) -> RequestStream:
        """Send ``request`` to the worker of canonical model ``model``.

        ``keep_alive`` (seconds; negative: never; None: the model's
        ``ttl``) is how long the worker stays loaded once idle, until a
        later request sets its own.

        The backend fills in the model's configured deadline (``timeout``).
        A :class:`~shared.protocol.TranscribeRequest` yields one output per
        decoded window and its transcript (or its error).
        An :class:`~shared.protocol.EmbedRequest` yields one output (its
        vectors or its error), a :class:`~shared.protocol.RerankRequest`
        one output (its scores or its error), a
        :class:`~shared.protocol.SpeechRequest` its audio outputs (see the
        wire contract).

        Raises:
            gateway.core.errors.APIError: 400 ``wrong_model_kind`` when the
                model is not of the request's kind (generation, embedding,
                rerank or speech); 503 when the worker is not ready, or
                503 ``overloaded`` (with ``Retry-After``) when the model's
                queue is full.
        """
        ...

    async def load(self, model: str, keep_alive: float | None = None) -> None:
        """Load canonical ``model`` (if it is not) and set its idle time as
        :meth:`submit` does. Raises the 503 :class:`~gateway.core.errors.APIError`
        of :meth:`submit`."""
        ...

    async def unload(self, model: str) -> None:
        """Unload canonical ``model`` once its requests finish."""
        ...

    def resident(self) -> list[Residency]:
        """The models whose workers are loaded, with memory and expiry."""
        ...

    async def model_files(self, models: list[str]) -> dict[str, ModelFiles]:
        """What each of the canonical ``models``' files on disk hold now,
        by name (small reads of local files, in a worker thread, never on
        the event loop; never the network, never the worker)."""
        ...
