"""Embedding vectors out of an embedding worker's output, for every front-end
that answers embeddings (OpenAI's ``/v1/embeddings``, Ollama's ``/api/embed``
and ``/api/embeddings``).

A worker sends all of a request's vectors as one run of little-endian
float32 bytes (``RequestOutput.embeddings``, ``embedding_dim`` values each);
:func:`embedding_rows` cuts it into one row per input and :func:`floats_of`
gives a row's exact values. Pure; runs on the gateway's event loop.
"""

from __future__ import annotations

import sys
from array import array

from shared.protocol import RequestOutput


def embedding_rows(output: RequestOutput, count: int) -> list[bytes] | None:
    """``count`` vectors of an embedding worker's ``output``, each as
    little-endian float32 bytes in input order; None when the output does
    not hold exactly that many vectors."""
    dim, data = output.embedding_dim, output.embeddings
    if data is None or dim <= 0 or len(data) != count * dim * 4:
        return None
    return [data[i * dim * 4 : (i + 1) * dim * 4] for i in range(count)]


def floats_of(row: bytes) -> list[float]:
    """Little-endian float32 bytes as Python floats (exactly those values)."""
    values = array("f")
    values.frombytes(row)
    if sys.byteorder != "little":
        values.byteswap()
    return values.tolist()
