"""Client-facing errors and their OpenAI-shaped bodies.

Handlers raise :class:`APIError`; the app turns it into
``{"error": {"message", "type", "param", "code"}}`` with the matching status
(and a ``Retry-After`` header when ``retry_after`` is set). The message is
always safe to show a client: it never contains prompt text or secrets.
"""

from __future__ import annotations

from typing import Any

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}


class APIError(Exception):
    """An error answered to the client instead of a result.

    ``status`` is the HTTP status; ``param`` names the offending request
    field (None when no single field is at fault); ``code`` is a short
    machine-readable code such as ``model_not_found``; ``retry_after``
    (seconds) adds a ``Retry-After`` header.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.retry_after = retry_after

    @property
    def type(self) -> str:
        """The OpenAI error ``type`` for this status."""
        return _TYPES.get(self.status, "server_error" if self.status >= 500 else "invalid_request_error")

    def openai_body(self) -> dict[str, Any]:
        """Return the OpenAI error object ``{"error": {...}}``."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def headers(self) -> dict[str, str]:
        """Extra response headers (``Retry-After`` when set)."""
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}


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


def unavailable(message: str, retry_after: int = 1) -> APIError:
    """A 503 for a model whose worker is not ready or gone."""
    return APIError(503, message, code="model_unavailable", retry_after=retry_after)
