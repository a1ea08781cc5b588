"""``POST /v1/rerank`` (also ``/rerank`` and ``/v2/rerank``): score documents
against a query with a reranker.

Decodes the body (:mod:`gateway.rerank.schema`), resolves the model,
submits one :class:`~shared.protocol.RerankRequest` to the model's worker
through the :class:`~gateway.core.backend.ModelBackend` (which refuses a
model of another kind with a 400 naming both kinds), waits for its single
result while watching the client
(:func:`gateway.frontend.request_flow.respond_to_only_output`; a client
that leaves aborts the request in the worker) and answers the results
sorted by ``relevance_score``, best first (ties keep document order), cut
to ``top_n``, each with its document's ``index`` (and, with
``return_documents``, the document), plus ``usage``. Errors are OpenAI
error objects (a worker's refusal keeps its status: too many documents
and over-long pairs are 400s).

Runs on the gateway's event loop; never blocks it beyond formatting the
answer.
"""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from gateway.core.errors import APIError, worker_error
from gateway.frontend.error_shapes import openai_error_response
from gateway.frontend.request_flow import JSON_MEDIA_TYPE, decode_and_submit, respond_to_only_output
from gateway.rerank.schema import RerankBody, decode_rerank_request, to_rerank_request
from shared.protocol import RequestOutput

_encoder = msgspec.json.Encoder()


class RerankResultDocument(msgspec.Struct, kw_only=True):
    """A result's document, as given (its text)."""

    text: str


class RerankResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One scored document: its position in the request's ``documents``,
    its score (the model's, e.g. a sigmoid probability) and, with
    ``return_documents``, the document."""

    index: int
    relevance_score: float
    document: RerankResultDocument | None = None


class RerankUsage(msgspec.Struct, kw_only=True):
    """Tokens of every query-document pair (special tokens included);
    ``total_tokens`` equals ``prompt_tokens``."""

    prompt_tokens: int
    total_tokens: int


class RerankResponse(msgspec.Struct, kw_only=True):
    """The ``POST /v1/rerank`` answer: ``results`` best first."""

    id: str
    model: str
    results: list[RerankResult]
    usage: RerankUsage


async def rerank(request: Request) -> Response:
    """``POST /v1/rerank``, ``/rerank``, ``/v2/rerank``: the sorted
    results, or an OpenAI error with its status."""
    try:
        sent = await decode_and_submit(request, decode_rerank_request, to_rerank_request, "rerank-")
    except APIError as err:
        return openai_error_response(err)

    return await respond_to_only_output(
        request,
        sent.stream,
        sent.work.request_id,
        refuse=lambda output: openai_error_response(worker_error(output, output.error_param or "documents")),
        answer=lambda output: _answer(sent.body, sent.model, sent.work.request_id, output),
    )


def _answer(body: RerankBody, model: str, request_id: str, output: RequestOutput) -> Response:
    """The response object for a finished request's ``output``."""
    texts = body.texts()
    scores = output.scores
    if scores is None or len(scores) != len(texts):
        return openai_error_response(APIError(500, "The model worker returned malformed scores", code="internal_error"))
    return Response(
        rerank_body(texts, scores, body, model, request_id, output.prompt_tokens), media_type=JSON_MEDIA_TYPE
    )


def rerank_body(
    texts: list[str], scores: list[float], body: RerankBody, model: str, request_id: str, prompt_tokens: int
) -> bytes:
    """The JSON answer: documents ranked by score, best first (a stable
    sort: equal scores keep document order), at most ``top_n``."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    if body.top_n is not None:
        order = order[: body.top_n]
    results = [
        RerankResult(
            index=i,
            relevance_score=scores[i],
            document=RerankResultDocument(text=texts[i]) if body.return_documents else None,
        )
        for i in order
    ]
    usage = RerankUsage(prompt_tokens=prompt_tokens, total_tokens=prompt_tokens)
    return _encoder.encode(RerankResponse(id=request_id, model=model, results=results, usage=usage))
