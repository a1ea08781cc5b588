"""The rerank front-end's part of the OpenAPI document: ``POST /v1/rerank``
(also ``/rerank`` and ``/v2/rerank``) and the types it is generated from.

Assembled with the other parts by :mod:`gateway.openapi_document`.
"""

from __future__ import annotations

from typing import Any

from gateway.frontend.openapi import PathBuilder
from gateway.rerank.routes import RerankResponse
from gateway.rerank.schema import RerankBody

BODIES: dict[str, Any] = {"rerank_request": RerankBody}
"""The request body the routes decode, by its key in the document's types."""

ANSWERS: dict[str, Any] = {"rerank_response": RerankResponse}
"""The answer the routes encode, by key."""

DECODED = frozenset(BODIES)
"""The keys of this part's types that the server decodes."""


def paths(b: PathBuilder) -> dict[str, Any]:
    """``POST /v1/rerank``, ``/rerank`` and ``/v2/rerank`` (one operation each)."""
    return {
        path: {
            "post": b.generation(
                operation_id="rerank" + suffix,
                summary="Rank documents against a query (Cohere/Jina/vLLM shape); needs a rerank model",
                tag="Rerank",
                body="rerank_request",
                example={
                    "model": b.model,
                    "query": "what is MLX?",
                    "documents": ["MLX is an array framework", "Bananas"],
                },
                ok=b.ok(
                    "The documents' `results` (`index`, `relevance_score`, `document`), best first, and `usage`",
                    b.refs["rerank_response"],
                ),
            )
        }
        for path, suffix in (("/v1/rerank", ""), ("/rerank", "Unversioned"), ("/v2/rerank", "V2"))
    }
