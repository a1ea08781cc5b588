"""The embeddings front-end's part of the OpenAPI document: ``POST
/v1/embeddings`` and the types it is generated from.

Assembled with the other parts by :mod:`gateway.openapi_document`.
"""

from __future__ import annotations

from typing import Any

from gateway.embeddings.routes import EmbeddingList
from gateway.embeddings.schema import EmbeddingRequest
from gateway.frontend.openapi import PathBuilder

BODIES: dict[str, Any] = {"embedding_request": EmbeddingRequest}
"""The request body the route decodes, by its key in the document's types."""

ANSWERS: dict[str, Any] = {"embedding_list": EmbeddingList}
"""The answer the route encodes, by key."""

DECODED = frozenset(BODIES)
"""The keys of this part's types that the server decodes."""


def paths(b: PathBuilder) -> dict[str, Any]:
    """``POST /v1/embeddings``."""
    return {
        "/v1/embeddings": {
            "post": b.generation(
                operation_id="createEmbedding",
                summary="Embed texts or token ids (OpenAI); needs an embedding model",
                tag="OpenAI",
                body="embedding_request",
                example={"model": b.model, "input": ["Hello", "world"]},
                ok=b.ok("A `list` of `embedding` objects, one per input, in order", b.refs["embedding_list"]),
            )
        },
    }
