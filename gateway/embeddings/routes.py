"""``POST /v1/embeddings``: OpenAI's embeddings endpoint.

Decodes the body (:mod:`gateway.embeddings.schema`), resolves the model,
submits one :class:`~shared.protocol.EmbedRequest` to the model's worker
through the :class:`~gateway.core.backend.ModelBackend` (which refuses a
generation model with a 400 naming its kind), waits for its single result
while watching the client (:func:`gateway.frontend.request_flow.respond_to_only_output`;
a client that leaves aborts the request in the worker) and answers a
``list`` of ``embedding`` objects in input order with ``usage``. Vectors
are JSON numbers (the float32 values exactly) or, with ``encoding_format``
``base64``, the base64 of their little-endian float32 bytes. Errors are
OpenAI error objects (a worker's refusal keeps its status: too many or too
long inputs and unavailable ``dimensions`` are 400s).

Runs on the gateway's event loop; never blocks it beyond formatting the
answer.
"""

from __future__ import annotations

import base64
from typing import Literal, Union

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from gateway.core.errors import APIError, worker_error
from gateway.embeddings.schema import EmbeddingRequest, decode_embedding_request, to_embed_request
from gateway.frontend.embedding_vectors import embedding_rows, floats_of
from gateway.frontend.error_shapes import openai_error_response
from gateway.frontend.request_flow import JSON_MEDIA_TYPE, decode_and_submit, respond_to_only_output
from shared.protocol import RequestOutput

_encoder = msgspec.json.Encoder()


class Embedding(msgspec.Struct, kw_only=True):
    """One input's vector: JSON numbers, or with ``encoding_format``
    ``base64`` the base64 of its little-endian float32 bytes; ``index`` is
    the input's position in the request."""

    object: Literal["embedding"] = "embedding"
    index: int
    embedding: Union[list[float], str]


class EmbeddingUsage(msgspec.Struct, kw_only=True):
    """Tokens of every input (the model's special tokens included);
    ``total_tokens`` equals ``prompt_tokens``."""

    prompt_tokens: int
    total_tokens: int


class EmbeddingList(msgspec.Struct, kw_only=True):
    """The ``POST /v1/embeddings`` answer (OpenAI's ``CreateEmbeddingResponse``):
    one :class:`Embedding` per input, in input order."""

    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


async def create_embeddings(request: Request) -> Response:
    """``POST /v1/embeddings``: a ``list`` of ``embedding`` objects, or an
    OpenAI error with its status."""
    try:
        sent = await decode_and_submit(request, decode_embedding_request, to_embed_request, "embd-")
    except APIError as err:
        return openai_error_response(err)

    return await respond_to_only_output(
        request,
        sent.stream,
        sent.work.request_id,
        refuse=lambda output: openai_error_response(worker_error(output, "input")),
        answer=lambda output: _answer(sent.body, sent.model, output),
    )


def _answer(body: EmbeddingRequest, model: str, output: RequestOutput) -> Response:
    """The response object for a finished request's ``output``."""
    count = len(body.input) if isinstance(body.input, list) and not isinstance(body.input[0], int) else 1
    rows = embedding_rows(output, count)
    if rows is None:
        return openai_error_response(
            APIError(500, "The model worker returned malformed embeddings", code="internal_error")
        )
    return Response(
        embeddings_body(rows, body.encoding_format, model, output.prompt_tokens), media_type=JSON_MEDIA_TYPE
    )


def embeddings_body(rows: list[bytes], encoding_format: str, model: str, prompt_tokens: int) -> bytes:
    """The JSON of OpenAI's ``CreateEmbeddingResponse``: ``rows`` holds each
    input's vector as little-endian float32 bytes, in input order."""
    if encoding_format == "base64":
        values: list[Union[list[float], str]] = [base64.b64encode(row).decode("ascii") for row in rows]
    else:
        values = [floats_of(row) for row in rows]
    return _encoder.encode(
        EmbeddingList(
            data=[Embedding(index=i, embedding=value) for i, value in enumerate(values)],
            model=model,
            usage=EmbeddingUsage(prompt_tokens=prompt_tokens, total_tokens=prompt_tokens),
        )
    )
