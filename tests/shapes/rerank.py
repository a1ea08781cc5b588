"""mlxd's own type for the rerank answer (no official SDK type exists):
the shape Jina's, vLLM's and Cohere's (v1) rerank clients read, written
from their documented fields, not from mlxd's Structs.

``results`` are ``{index, relevance_score, document?}`` with ``document``
``{"text"}``; ``usage`` has ``total_tokens`` (and mlxd's
``prompt_tokens``); ``id`` and ``model`` name the answer and the model.
Unknown fields are refused, so a stray field shows up.
"""

from __future__ import annotations

import pydantic


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")


class RerankDocument(_Strict):
    """A result's document as returned with ``return_documents``."""

    text: str


class RerankResult(_Strict):
    """One ranked document."""

    index: int
    relevance_score: float
    document: RerankDocument | None = None


class RerankUsage(_Strict):
    """Tokens of the scored pairs."""

    prompt_tokens: int
    total_tokens: int


class RerankResponse(_Strict):
    """The whole answer."""

    id: str
    model: str
    results: list[RerankResult]
    usage: RerankUsage
