"""Request body of ``POST /v1/rerank`` in the shape rerank clients share
(Cohere's ``/v1/rerank`` and ``/v2/rerank``, Jina's, vLLM's).

Decoding is strict, as for the other bodies
(:func:`gateway.frontend.validation.decode_body`): unknown fields are refused by
name, nothing is coerced. Fields:

- ``model`` (required): a configured rerank model or alias.
- ``query`` (required): a non-empty string.
- ``documents`` (required): a non-empty list of non-empty strings, or of
  objects with a ``text`` string (other keys of such an object are
  refused: mlxd ranks the text only). At most :data:`MAX_DOCUMENTS` pass
  here; the model's ``max_inputs`` is checked by its worker.
- ``top_n``: how many of the best results to return (default: all; a
  larger value than there are documents returns all).
- ``return_documents``: include each result's document as
  ``{"text": ...}`` (default true, as Jina and vLLM answer).
- ``truncate`` (mlxd extension, as for embeddings): true cuts documents
  whose pair with the query is over the model's limit, keeping their
  start, instead of refusing them.

Every refusal is an :class:`~gateway.core.errors.APIError` 400 naming the
field. :func:`to_rerank_request` builds the worker's
:class:`~shared.protocol.RerankRequest`.
"""

from __future__ import annotations

from typing import Annotated, Union

import msgspec
from msgspec import Meta

from gateway.core.errors import bad_request
from gateway.frontend.validation import ModelName, Text, decode_body
from shared.protocol import RerankRequest

MAX_DOCUMENTS = 65536
"""Most documents one request may hold before any model limit applies."""


class RerankDocument(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A document given as an object: its ``text``."""

    text: Text


class RerankBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A decoded ``POST /v1/rerank`` body; produced only by
    :func:`decode_rerank_request`, after which the texts have been
    checked as the module docstring says."""

    model: ModelName
    query: Text
    documents: list[Union[Text, RerankDocument]]
    top_n: Annotated[int, Meta(ge=1)] | None = None
    return_documents: bool = True
    truncate: bool | None = None

    def texts(self) -> list[str]:
        """Every document's text, in order."""
        return [d if isinstance(d, str) else d.text for d in self.documents]


_decoder = msgspec.json.Decoder(RerankBody)


def decode_rerank_request(body: bytes) -> RerankBody:
    """Decode and validate a rerank body.

    Raises:
        gateway.core.errors.APIError: 400 for a malformed body, an unknown or
            missing field, a value of the wrong type, an empty query, no
            documents, an empty document, or more than
            :data:`MAX_DOCUMENTS` documents.
    """
    request: RerankBody = decode_body(_decoder, body)
    if not request.query:
        raise bad_request("'query' must not be an empty string", "query")
    if not request.documents:
        raise bad_request("'documents' must not be an empty list", "documents")
    if len(request.documents) > MAX_DOCUMENTS:
        raise bad_request(
            f"'documents' holds {len(request.documents)} documents; at most {MAX_DOCUMENTS} are accepted", "documents"
        )
    for i, text in enumerate(request.texts()):
        if not text:
            raise bad_request(f"'documents[{i}]' must not be empty", "documents")
    return request


def to_rerank_request(body: RerankBody, request_id: str) -> RerankRequest:
    """The worker's :class:`~shared.protocol.RerankRequest` for ``body``."""
    return RerankRequest(request_id=request_id, query=body.query, documents=body.texts(), truncate=bool(body.truncate))
