"""Request body of ``POST /v1/embeddings`` (OpenAI's embeddings API).

Decoding is strict, as for the other OpenAI bodies
(:func:`gateway.frontend.validation.decode_body`): unknown fields are refused by
name, nothing is coerced. Fields:

- ``model`` (required): a configured embedding model or alias.
- ``input`` (required): a string, a list of strings, a list of token ids
  (one input), or a list of token-id lists. Strings must not be empty, a
  list must not be empty, token ids are non-negative integers, and one
  request mixes no kinds. At most :data:`MAX_INPUTS` inputs pass here; the
  model's ``max_inputs`` and its tokens-per-input limit are checked by its
  worker (over either: a 400, never a silent cut).
- ``encoding_format``: ``float`` (default) or ``base64`` (the float32
  little-endian bytes of each vector, base64-encoded).
- ``dimensions``: the vector length wanted; the model's own length is
  always accepted, a shorter one only where the model's config allows it
  (``shorten_dimensions``), else a 400 from the worker.
- ``user``: accepted and not used (mlxd has no per-user accounting).
- ``truncate`` (mlxd extension): true cuts inputs longer than the model's
  limit to the limit, keeping their start, instead of refusing them.

Every refusal is an :class:`~gateway.core.errors.APIError` 400 naming the field.
:func:`to_embed_request` builds the worker's
:class:`~shared.protocol.EmbedRequest`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from gateway.core.errors import bad_request
from gateway.frontend.validation import MAX_TEXT_CHARS, MAX_TOKEN_ID, ModelName, ShortText, decode_body
from shared.protocol import EmbedRequest

MAX_INPUTS = 65536
"""Most inputs one request may hold before any model limit applies."""

MAX_DIMENSIONS = 1 << 16
"""Largest ``dimensions`` accepted by type (the model decides what it offers)."""


class EmbeddingRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A decoded ``POST /v1/embeddings`` body; produced only by
    :func:`decode_embedding_request`, after which ``input`` has been checked
    as the module docstring says."""

    model: ModelName
    input: Any
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, Meta(ge=1, le=MAX_DIMENSIONS)] | None = None
    user: ShortText | None = None
    truncate: bool | None = None


_decoder = msgspec.json.Decoder(EmbeddingRequest)


def decode_embedding_request(body: bytes) -> EmbeddingRequest:
    """Decode and validate an embeddings body.

    Raises:
        gateway.core.errors.APIError: 400 for a malformed body, an unknown or
            missing field, a value of the wrong type, or a bad ``input``.
    """
    request: EmbeddingRequest = decode_body(_decoder, body)
    split_input(request.input)
    return request


def split_input(value: Any) -> tuple[list[str] | None, list[list[int]] | None]:
    """``input`` as ``(texts, None)`` or ``(None, token_id_lists)``.

    Raises:
        gateway.core.errors.APIError: 400 (``param`` ``input``) for an empty
            string or list, a mix of kinds, a value of another type, a
            negative or huge token id, more than :data:`MAX_INPUTS` inputs,
            or a text over the length bound.
    """
    if isinstance(value, str):
        return [_text(value, "input")], None
    if not isinstance(value, list):
        raise bad_request(
            "'input' must be a string, a list of strings, a list of token ids or a list of token-id lists", "input"
        )
    if not value:
        raise bad_request("'input' must not be an empty list", "input")
    if len(value) > MAX_INPUTS:
        raise bad_request(f"'input' holds {len(value)} inputs; at most {MAX_INPUTS} are accepted", "input")
    if all(isinstance(item, str) for item in value):
        return [_text(item, f"input[{i}]") for i, item in enumerate(value)], None
    if all(_is_int(item) for item in value):
        return None, [_token_ids(value, "input")]
    if all(isinstance(item, list) for item in value):
        return None, [_token_ids(item, f"input[{i}]") for i, item in enumerate(value)]
    raise bad_request(
        "'input' must be all strings, all token ids or all token-id lists (not a mix, nor other types)", "input"
    )


def _is_int(value: Any) -> bool:
    """An integer that is not a boolean."""
    return isinstance(value, int) and not isinstance(value, bool)


def _text(value: str, path: str) -> str:
    """A non-empty input text within the length bound."""
    if not value:
        raise bad_request(f"'{path}' must not be an empty string", "input")
    if len(value) > MAX_TEXT_CHARS:
        raise bad_request(f"'{path}' is longer than {MAX_TEXT_CHARS} characters", "input")
    return value


def _token_ids(value: list[Any], path: str) -> list[int]:
    """A non-empty list of token ids."""
    if not value:
        raise bad_request(f"'{path}' must not be an empty list of token ids", "input")
    for item in value:
        if not _is_int(item) or not 0 <= item <= MAX_TOKEN_ID:
            raise bad_request(f"'{path}' must hold only token ids (non-negative integers)", "input")
    return value


def to_embed_request(request: EmbeddingRequest, request_id: str) -> EmbedRequest:
    """The worker's :class:`~shared.protocol.EmbedRequest` for ``request``."""
    texts, token_ids = split_input(request.input)
    return EmbedRequest(
        request_id=request_id,
        texts=texts,
        token_ids=token_ids,
        truncate=bool(request.truncate),
        dimensions=request.dimensions,
    )
