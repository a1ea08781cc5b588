"""Client-facing errors and the one table of worker error kinds.

Handlers raise :class:`APIError`; the app renders it in the protocol of the
route it answers (:mod:`gateway.frontend.error_shapes`: OpenAI's, Anthropic's or
Ollama's shape). The message is always safe to show a client: it never
contains prompt text or secrets.

A worker ends a request early with an ``error`` output whose ``error_kind``
(:data:`shared.protocol.ErrorKind`) says why, or with an ``abort``;
:data:`WORKER_ERRORS` maps each kind to its status, code and default
message, and :func:`worker_error` turns such an output into an
:class:`APIError` for every protocol. This module is protocol-neutral: the
wire ``type`` of an error and Anthropic's 529 are the renderers' business.
"""

from __future__ import annotations

from typing import NamedTuple

from shared.protocol import RequestOutput

OVERLOADED_RETRY_AFTER = 1
"""``Retry-After`` (seconds) of an overloaded, unavailable or aborted answer
that set none."""


class APIError(Exception):
    """An error answered to the client instead of a result.

    ``status`` is the HTTP status; ``param`` names the offending request
    field (None when no single field is at fault); ``code`` is a short
    machine-readable code such as ``model_not_found``; ``retry_after``
    (seconds) adds a ``Retry-After`` header; ``openai_type`` (None: the
    status's usual type) is the ``type`` of the OpenAI error object (a rate
    limit's ``requests`` or ``tokens``, as OpenAI's own) and ``headers``
    extra response headers (rate-limit state).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after: int | None = None,
        openai_type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.openai_type = openai_type
        self.extra_headers = dict(headers or {})
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        """Extra response headers (``Retry-After`` when set, and the
        ``headers`` given)."""
        retry = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}
        return {**self.extra_headers, **retry}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    """A 400 ``invalid_request_error`` about ``param``."""
    return APIError(400, message, param=param, code=code)


def model_not_found(name: str) -> APIError:
    """The 404 for a model name that is not configured."""
    return APIError(
        404,
        f"The model '{name}' does not exist",
        param="model",
        code="model_not_found",
    )


def unavailable(message: str, retry_after: int = OVERLOADED_RETRY_AFTER) -> APIError:
    """A 503 for a model whose worker is not ready or gone."""
    return APIError(503, message, code="model_unavailable", retry_after=retry_after)


# --- worker error kinds ------------------------------------------------------------


class WorkerErrorKind(NamedTuple):
    """How one worker ``error_kind`` is answered: its HTTP ``status``, the
    ``code`` of the error body (None: no code), its ``retry_after`` seconds
    (None: no ``Retry-After``) and the ``message`` used when the worker sent
    none."""

    status: int
    code: str | None
    retry_after: int | None
    message: str


WORKER_ERRORS: dict[str, WorkerErrorKind] = {
    "invalid_request": WorkerErrorKind(400, None, None, "The model worker rejected the request"),
    "context_length_exceeded": WorkerErrorKind(
        400, "context_length_exceeded", None, "The request exceeds the model's context length"
    ),
    "overloaded": WorkerErrorKind(503, "overloaded", OVERLOADED_RETRY_AFTER, "The model is overloaded; retry shortly"),
    "unavailable": WorkerErrorKind(
        503, "model_unavailable", OVERLOADED_RETRY_AFTER, "The model is unavailable; retry shortly"
    ),
    "internal": WorkerErrorKind(500, "internal_error", None, "The model worker failed while generating"),
    "timeout": WorkerErrorKind(504, "timeout", None, "The request ran past its deadline and was stopped"),
}
"""Every :data:`shared.protocol.ErrorKind` and how it is answered (a 503 is
rendered as Anthropic's 529 ``overloaded_error`` on ``/v1/messages``)."""

ABORTED = WorkerErrorKind(503, "aborted", OVERLOADED_RETRY_AFTER, "The request was aborted before it finished")
"""How an ``abort`` output (server shutting down) is answered: a 503 so
clients retry elsewhere or later."""


def worker_error(output: RequestOutput, prompt_param: str = "prompt", params: dict[str, str] | None = None) -> APIError:
    """Return the client error for a terminal ``"error"`` or ``"abort"`` output.

    ``error_kind`` picks the row of :data:`WORKER_ERRORS` (an unknown or
    missing kind is ``internal``); an abort is :data:`ABORTED`. The
    worker's ``error`` text is the message when it sent one. ``param`` is
    the worker's ``error_param`` in the endpoint's terms: ``prompt`` (and
    any context-length error) becomes ``prompt_param`` (``messages``,
    ``prompt`` or ``input``), other names go through ``params`` (e.g.
    ``response_format`` -> ``text.format``) or stay as they are.
    """
    if output.finish_reason == "abort":
        return APIError(ABORTED.status, ABORTED.message, code=ABORTED.code, retry_after=ABORTED.retry_after)
    kind = WORKER_ERRORS.get(output.error_kind or "internal", WORKER_ERRORS["internal"])
    field = output.error_param
    if output.error_kind == "context_length_exceeded" or field == "prompt":
        param: str | None = prompt_param
    else:
        param = (params or {}).get(field, field) if field else None
    return APIError(
        kind.status, output.error or kind.message, param=param, code=kind.code, retry_after=kind.retry_after
    )


def stream_error_code(err: APIError, output: RequestOutput) -> str:
    """The ``code`` of a mid-stream error event for ``err``, the
    :func:`worker_error` of ``output``: its code, else the worker's kind
    (``invalid_request``), else ``internal_error``."""
    return err.code or output.error_kind or "internal_error"
