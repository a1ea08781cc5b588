"""Submitting a ``POST /v1/responses`` request: the one path from a decoded
body to a worker's request stream and the builder of its answer, shared by
the endpoint (:mod:`gateway.responses.routes`) and every round of the MCP
tool loop (:mod:`gateway.responses.mcp`).

Runs on the gateway's event loop; reaches the workers only through
:class:`~gateway.core.backend.ModelBackend`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from gateway.core.backend import ModelBackend, RequestStream
from gateway.core.errors import APIError, worker_error
from gateway.frontend.dropped_tools import dropped_headers
from gateway.images.request import model_takes_images
from gateway.responses.builder import ResponseBuilder, ResponseHead
from gateway.responses.schema import ResponsesRequest
from gateway.responses.translate import dropped_tools, output_options, response_settings, to_generate_request
from shared.protocol import RequestOutput

PROMPT_PARAM = "input"
"""The request field a context-length error names."""

PARAMS = {"response_format": "text.format"}
"""Worker field names that this endpoint spells differently (see
:func:`gateway.core.errors.worker_error`)."""


@dataclass(frozen=True)
class ResponsesJob:
    """One admitted request: the decoded body, the worker's request stream,
    the builder of its response and the headers every answer carries."""

    request: ResponsesRequest
    stream: RequestStream
    builder: ResponseBuilder
    request_id: str
    headers: dict[str, str]


def error_of(output: RequestOutput) -> APIError:
    """The client error for an ``error``/``abort`` output of this endpoint
    (a context-length error names ``input``)."""
    return worker_error(output, PROMPT_PARAM, PARAMS)


async def submit_decoded(backend: ModelBackend, req: ResponsesRequest, request_id: str) -> ResponsesJob:
    """Resolve the model of the decoded ``req`` and submit it as
    ``request_id`` (also the response's ``id``).

    Raises:
        APIError: 404 unknown model, 503 worker not ready or overloaded.
    """
    model = backend.resolve(req.model)
    generate = to_generate_request(req, request_id, model_takes_images(backend, model))
    stream = await backend.submit(model, generate)
    head = ResponseHead(id=request_id, created_at=int(time.time()), model=model)
    defaults = next((m.sampling_defaults for m in backend.models() if m.name == model), None)
    builder = ResponseBuilder(head, response_settings(req, defaults), options=output_options(req), error_of=error_of)
    return ResponsesJob(req, stream, builder, request_id, dropped_headers(dropped_tools(req), "/v1/responses"))
